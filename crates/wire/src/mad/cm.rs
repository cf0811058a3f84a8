//! Communication management (class 0x07): REQ, MRA, REJ, REP, RTU, DREQ, DREP and
//! the SIDR pair.
//!
//! A CM MAD is the common header followed by a 232-byte message (IBTA 12.6). Byte
//! and bit positions below are relative to the start of that message and follow the
//! IBTA tables as kernel `include/rdma/ibta_vol1_c12.h` encodes them
//! (`CM_REQ_*`, `CM_REP_*`, ...: `CM_FIELD*_LOC(struct, byte, width)` and
//! `CM_FIELD_BLOC(struct, byte, bit, width)` with bit 0 = most significant).
//! LAP and APR messages are not modelled (the kernel ignores them on RoCE): [`CmMadRepr::parse`] reports them as
//! [`Error::Unsupported`].

use super::{attr, check_class, class, layout, MadHeaderRepr, MAD_HEADER_LEN, MAD_LEN};
use crate::{Error, Result};

/// Length of the CM message after the common header.
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;

/// CM class version used by current stacks (the kernel's `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// Transport service types of REQ (IBTA 12.6.5).
pub mod transport {
    /// Reliable connection.
    pub const RC: u8 = 0;
    /// Unreliable connection.
    pub const UC: u8 = 1;
    /// Reliable datagram.
    pub const RD: u8 = 2;
    /// Value 3: see the extended transport type (XRC).
    pub const EXTENDED: u8 = 3;
}

/// `MessageMRAed` / `MessageRejected` values (IBTA 12.6.6, 12.6.7).
pub mod message_kind {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// The LAP (MRA) / other (REJ).
    pub const OTHER: u8 = 2;
}

layout! {
    /// The path fields of a REQ (primary at message byte 52, alternate at 96; IBTA
    /// 12.6.5 Table 106 "Primary/Alternate ..." rows), 44 bytes.
    view CmPath;
    /// One REQ path, owned.
    repr CmPathRepr;
    len 44; what "CM path";
    fields {
        /// Local port LID.
        local_port_lid / set_local_port_lid: u16 = (0, 0, 16);
        /// Remote port LID.
        remote_port_lid / set_remote_port_lid: u16 = (2, 0, 16);
        /// Local port GID.
        local_port_gid / set_local_port_gid: [u8; 16] = (4, 0, 128);
        /// Remote port GID.
        remote_port_gid / set_remote_port_gid: [u8; 16] = (20, 0, 128);
        /// Flow label (20 bits; the next 6 bits are reserved).
        flow_label / set_flow_label: u32 = (36, 0, 20);
        /// Packet rate (6 bits).
        packet_rate / set_packet_rate: u8 = (39, 2, 6);
        /// Traffic class.
        traffic_class / set_traffic_class: u8 = (40, 0, 8);
        /// Hop limit.
        hop_limit / set_hop_limit: u8 = (41, 0, 8);
        /// SL (4 bits).
        sl / set_sl: u8 = (42, 0, 4);
        /// Subnet local (1 bit; 3 reserved bits follow).
        subnet_local / set_subnet_local: bool = (42, 4, 1);
        /// Local ACK timeout (5 bits; 3 reserved bits follow, the alternate path's
        /// first of which is SAPSupported in newer IBTA releases, not modelled).
        local_ack_timeout / set_local_ack_timeout: u8 = (43, 0, 5);
    }
}

layout! {
    /// ConnectRequest (REQ, attribute 0x0010; IBTA Table 106), over the
    /// 232-byte CM message.
    view CmReq;
    /// ConnectRequest, owned.
    repr CmReqRepr;
    len CM_DATA_LEN; what "CM REQ";
    fields {
        /// Local communication ID (bytes 4-7 reserved).
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Service ID.
        service_id / set_service_id: u64 = (8, 0, 64);
        /// Local CA GUID (bytes 24-27 reserved).
        local_ca_guid / set_local_ca_guid: u64 = (16, 0, 64);
        /// Local Q_Key.
        local_q_key / set_local_q_key: u32 = (28, 0, 32);
        /// Local QPN (24 bits).
        local_qpn / set_local_qpn: u32 = (32, 0, 24);
        /// Responder resources.
        responder_resources / set_responder_resources: u8 = (35, 0, 8);
        /// Local EECN (24 bits).
        local_eecn / set_local_eecn: u32 = (36, 0, 24);
        /// Initiator depth.
        initiator_depth / set_initiator_depth: u8 = (39, 0, 8);
        /// Remote EECN (24 bits).
        remote_eecn / set_remote_eecn: u32 = (40, 0, 24);
        /// Remote CM response timeout (5 bits).
        remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = (43, 0, 5);
        /// Transport service type (2 bits), see [`transport`].
        transport_service_type / set_transport_service_type: u8 = (43, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control / set_end_to_end_flow_control: bool = (43, 7, 1);
        /// Starting PSN (24 bits).
        starting_psn / set_starting_psn: u32 = (44, 0, 24);
        /// Local CM response timeout (5 bits).
        local_cm_response_timeout / set_local_cm_response_timeout: u8 = (47, 0, 5);
        /// Retry count (3 bits).
        retry_count / set_retry_count: u8 = (47, 5, 3);
        /// Partition key.
        partition_key / set_partition_key: u16 = (48, 0, 16);
        /// Path packet payload MTU (4 bits, IBTA MTU encoding).
        path_mtu / set_path_mtu: u8 = (50, 0, 4);
        /// RDC exists.
        rdc_exists / set_rdc_exists: bool = (50, 4, 1);
        /// RNR retry count (3 bits).
        rnr_retry_count / set_rnr_retry_count: u8 = (50, 5, 3);
        /// Max CM retries (4 bits).
        max_cm_retries / set_max_cm_retries: u8 = (51, 0, 4);
        /// SRQ.
        srq / set_srq: bool = (51, 4, 1);
        /// Extended transport type (3 bits).
        extended_transport_type / set_extended_transport_type: u8 = (51, 5, 3);
        /// Primary path (bytes 52-95).
        primary_path / set_primary_path: CmPathRepr = (52, 0, 352);
        /// Alternate path (bytes 96-139), all zero when there is none.
        alternate_path / set_alternate_path: CmPathRepr = (96, 0, 352);
        /// Private data (92 bytes).
        private_data / set_private_data: [u8; 92] = (140, 0, 736);
    }
}

layout! {
    /// MessageReceiptAcknowledgement (MRA, 0x0011; IBTA Table 107).
    view CmMra;
    /// MRA, owned.
    repr CmMraRepr;
    len CM_DATA_LEN; what "CM MRA";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Message MRAed (2 bits), see [`message_kind`].
        message_mraed / set_message_mraed: u8 = (8, 0, 2);
        /// Service timeout (5 bits).
        service_timeout / set_service_timeout: u8 = (9, 0, 5);
        /// Private data (222 bytes).
        private_data / set_private_data: [u8; 222] = (10, 0, 1776);
    }
}

layout! {
    /// ConnectReject (REJ, 0x0012; IBTA Table 108).
    view CmRej;
    /// REJ, owned.
    repr CmRejRepr;
    len CM_DATA_LEN; what "CM REJ";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Message rejected (2 bits), see [`message_kind`].
        message_rejected / set_message_rejected: u8 = (8, 0, 2);
        /// Reject info length (7 bits): bytes of ARI in use.
        reject_info_length / set_reject_info_length: u8 = (9, 0, 7);
        /// Reason.
        reason / set_reason: u16 = (10, 0, 16);
        /// Additional reject information (72 bytes).
        ari / set_ari: [u8; 72] = (12, 0, 576);
        /// Private data (148 bytes).
        private_data / set_private_data: [u8; 148] = (84, 0, 1184);
    }
}

layout! {
    /// ConnectReply (REP, 0x0013; IBTA Table 110).
    view CmRep;
    /// REP, owned.
    repr CmRepRepr;
    len CM_DATA_LEN; what "CM REP";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Local Q_Key.
        local_q_key / set_local_q_key: u32 = (8, 0, 32);
        /// Local QPN (24 bits).
        local_qpn / set_local_qpn: u32 = (12, 0, 24);
        /// Local EE context number (24 bits).
        local_eecn / set_local_eecn: u32 = (16, 0, 24);
        /// Starting PSN (24 bits).
        starting_psn / set_starting_psn: u32 = (20, 0, 24);
        /// Responder resources.
        responder_resources / set_responder_resources: u8 = (24, 0, 8);
        /// Initiator depth.
        initiator_depth / set_initiator_depth: u8 = (25, 0, 8);
        /// Target ACK delay (5 bits).
        target_ack_delay / set_target_ack_delay: u8 = (26, 0, 5);
        /// Failover accepted (2 bits).
        failover_accepted / set_failover_accepted: u8 = (26, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control / set_end_to_end_flow_control: bool = (26, 7, 1);
        /// RNR retry count (3 bits).
        rnr_retry_count / set_rnr_retry_count: u8 = (27, 0, 3);
        /// SRQ.
        srq / set_srq: bool = (27, 3, 1);
        /// Local CA GUID.
        local_ca_guid / set_local_ca_guid: u64 = (28, 0, 64);
        /// Private data (196 bytes).
        private_data / set_private_data: [u8; 196] = (36, 0, 1568);
    }
}

layout! {
    /// ReadyToUse (RTU, 0x0014; IBTA Table 111).
    view CmRtu;
    /// RTU, owned.
    repr CmRtuRepr;
    len CM_DATA_LEN; what "CM RTU";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Private data (224 bytes).
        private_data / set_private_data: [u8; 224] = (8, 0, 1792);
    }
}

layout! {
    /// DisconnectRequest (DREQ, 0x0015; IBTA Table 112).
    view CmDreq;
    /// DREQ, owned.
    repr CmDreqRepr;
    len CM_DATA_LEN; what "CM DREQ";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Remote QPN/EECN (24 bits).
        remote_qpn_eecn / set_remote_qpn_eecn: u32 = (8, 0, 24);
        /// Private data (220 bytes).
        private_data / set_private_data: [u8; 220] = (12, 0, 1760);
    }
}

layout! {
    /// DisconnectReply (DREP, 0x0016; IBTA Table 113). Same shape as RTU.
    view CmDrep;
    /// DREP, owned.
    repr CmDrepRepr;
    len CM_DATA_LEN; what "CM DREP";
    fields {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Private data (224 bytes).
        private_data / set_private_data: [u8; 224] = (8, 0, 1792);
    }
}

layout! {
    /// ServiceIDResolutionRequest (SIDR_REQ, 0x0017; IBTA 12.11 Table 119, kernel
    /// `CM_SIDR_REQ_*`).
    view CmSidrReq;
    /// SIDR_REQ, owned.
    repr CmSidrReqRepr;
    len CM_DATA_LEN; what "CM SIDR REQ";
    fields {
        /// Request ID (the requester's communication ID).
        request_id / set_request_id: u32 = (0, 0, 32);
        /// Partition key (bytes 6-7 reserved).
        partition_key / set_partition_key: u16 = (4, 0, 16);
        /// Service ID.
        service_id / set_service_id: u64 = (8, 0, 64);
        /// Private data (216 bytes).
        private_data / set_private_data: [u8; 216] = (16, 0, 1728);
    }
}

layout! {
    /// ServiceIDResolutionResponse (SIDR_REP, 0x0018; IBTA 12.11 Table 120, kernel
    /// `CM_SIDR_REP_*`).
    view CmSidrRep;
    /// SIDR_REP, owned.
    repr CmSidrRepRepr;
    len CM_DATA_LEN; what "CM SIDR REP";
    fields {
        /// Request ID (copied from the SIDR_REQ).
        request_id / set_request_id: u32 = (0, 0, 32);
        /// Status (IBTA 12.11; kernel `enum ib_cm_sidr_status`).
        status / set_status: u8 = (4, 0, 8);
        /// Additional information length.
        additional_information_length / set_additional_information_length: u8 = (5, 0, 8);
        /// Vendor ID, high 16 bits (ECE; zero when unused).
        vendor_id_h / set_vendor_id_h: u16 = (6, 0, 16);
        /// QPN (24 bits).
        qpn / set_qpn: u32 = (8, 0, 24);
        /// Vendor ID, low 8 bits.
        vendor_id_l / set_vendor_id_l: u8 = (11, 0, 8);
        /// Service ID.
        service_id / set_service_id: u64 = (12, 0, 64);
        /// Q_Key.
        q_key / set_q_key: u32 = (20, 0, 32);
        /// Additional information (72 bytes; a ClassPortInfo on redirect).
        additional_information / set_additional_information: [u8; 72] = (24, 0, 576);
        /// Private data (136 bytes).
        private_data / set_private_data: [u8; 136] = (96, 0, 1088);
    }
}

layout! {
    /// A CM MAD, over a whole 256-byte MAD: the header and the 232-byte message
    /// ([`CmMad::data_ref`]) that the message views read.
    view CmMad;
    len MAD_LEN; what "CM MAD";
    fields {
        /// The common header.
        header / set_header: MadHeaderRepr = (0, 0, 192);
    }
}

impl<T: AsRef<[u8]>> CmMad<T> {
    /// The 232-byte message after the header.
    pub fn data_ref(&self) -> &[u8] {
        &self.buffer.as_ref()[MAD_HEADER_LEN..MAD_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmMad<T> {
    /// The 232-byte message after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[MAD_HEADER_LEN..MAD_LEN]
    }
}

/// One CM message, selected by the MAD's attribute ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(CmReqRepr),
    /// MessageReceiptAcknowledgement.
    Mra(CmMraRepr),
    /// ConnectReject.
    Rej(CmRejRepr),
    /// ConnectReply.
    Rep(CmRepRepr),
    /// ReadyToUse.
    Rtu(CmRtuRepr),
    /// DisconnectRequest.
    Dreq(CmDreqRepr),
    /// DisconnectReply.
    Drep(CmDrepRepr),
    /// ServiceIDResolutionRequest.
    SidrReq(CmSidrReqRepr),
    /// ServiceIDResolutionResponse.
    SidrRep(CmSidrRepRepr),
}

impl CmMessage {
    /// The attribute ID this message travels under.
    pub const fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::CM_REQ,
            CmMessage::Mra(_) => attr::CM_MRA,
            CmMessage::Rej(_) => attr::CM_REJ,
            CmMessage::Rep(_) => attr::CM_REP,
            CmMessage::Rtu(_) => attr::CM_RTU,
            CmMessage::Dreq(_) => attr::CM_DREQ,
            CmMessage::Drep(_) => attr::CM_DREP,
            CmMessage::SidrReq(_) => attr::CM_SIDR_REQ,
            CmMessage::SidrRep(_) => attr::CM_SIDR_REP,
        }
    }

    /// Reads the message `attribute_id` names from a 232-byte CM message.
    pub fn parse(attribute_id: u16, data: &[u8]) -> Result<Self> {
        Ok(match attribute_id {
            attr::CM_REQ => CmMessage::Req(CmReqRepr::parse(&CmReq::new_checked(data)?)?),
            attr::CM_MRA => CmMessage::Mra(CmMraRepr::parse(&CmMra::new_checked(data)?)?),
            attr::CM_REJ => CmMessage::Rej(CmRejRepr::parse(&CmRej::new_checked(data)?)?),
            attr::CM_REP => CmMessage::Rep(CmRepRepr::parse(&CmRep::new_checked(data)?)?),
            attr::CM_RTU => CmMessage::Rtu(CmRtuRepr::parse(&CmRtu::new_checked(data)?)?),
            attr::CM_DREQ => CmMessage::Dreq(CmDreqRepr::parse(&CmDreq::new_checked(data)?)?),
            attr::CM_DREP => CmMessage::Drep(CmDrepRepr::parse(&CmDrep::new_checked(data)?)?),
            attr::CM_SIDR_REQ => {
                CmMessage::SidrReq(CmSidrReqRepr::parse(&CmSidrReq::new_checked(data)?)?)
            }
            attr::CM_SIDR_REP => {
                CmMessage::SidrRep(CmSidrRepRepr::parse(&CmSidrRep::new_checked(data)?)?)
            }
            _ => return Err(Error::Unsupported("CM attribute (LAP, APR or unknown)")),
        })
    }

    /// Writes the message (zeroing its reserved bits) into a 232-byte CM message.
    ///
    /// # Panics
    /// If `data` is shorter than [`CM_DATA_LEN`].
    pub fn emit(&self, data: &mut [u8]) {
        match self {
            CmMessage::Req(m) => m.emit(&mut CmReq::new_unchecked(data)),
            CmMessage::Mra(m) => m.emit(&mut CmMra::new_unchecked(data)),
            CmMessage::Rej(m) => m.emit(&mut CmRej::new_unchecked(data)),
            CmMessage::Rep(m) => m.emit(&mut CmRep::new_unchecked(data)),
            CmMessage::Rtu(m) => m.emit(&mut CmRtu::new_unchecked(data)),
            CmMessage::Dreq(m) => m.emit(&mut CmDreq::new_unchecked(data)),
            CmMessage::Drep(m) => m.emit(&mut CmDrep::new_unchecked(data)),
            CmMessage::SidrReq(m) => m.emit(&mut CmSidrReq::new_unchecked(data)),
            CmMessage::SidrRep(m) => m.emit(&mut CmSidrRep::new_unchecked(data)),
        }
    }
}

/// A whole CM MAD, owned: the common header and the typed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMadRepr {
    /// The common header. On emit its `attribute_id` is replaced by the message's.
    pub header: MadHeaderRepr,
    /// The message.
    pub message: CmMessage,
}

impl CmMadRepr {
    /// Reads a CM MAD: base version 1, class 0x07, and one of the nine modelled
    /// attribute IDs ([`Error::Unsupported`] for the others).
    pub fn parse<T: AsRef<[u8]>>(mad: &CmMad<T>) -> Result<Self> {
        mad.check_len()?;
        let header = mad.header();
        check_class(
            &header,
            class::CM,
            "MAD class is not communication management (0x07)",
        )?;
        let message = CmMessage::parse(header.attribute_id, mad.data_ref())?;
        Ok(Self { header, message })
    }

    /// Writes the whole 256-byte MAD (reserved bits zero), taking the attribute ID
    /// from the message.
    ///
    /// # Panics
    /// If the buffer is shorter than [`MAD_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, mad: &mut CmMad<T>) {
        mad.as_bytes_mut()[..MAD_LEN].fill(0);
        mad.set_header(MadHeaderRepr {
            attribute_id: self.message.attribute_id(),
            ..self.header
        });
        self.message.emit(mad.data_mut());
    }

    /// Bytes [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }
}

#[cfg(test)]
mod tests;
