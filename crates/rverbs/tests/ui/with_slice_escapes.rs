// The &mut [u8] of Mr::with exists only inside the closure, while the device waits:
// it cannot be kept to alias memory the device writes later.
use rverbs::AccessFlags;

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(64, AccessFlags::ALL)?;
    let bytes: &mut [u8] = mr.with(|b| b);
    bytes[0] = 1;
    Ok(())
}
