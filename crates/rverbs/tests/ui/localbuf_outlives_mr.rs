// A LocalBuf borrows its Mr: the region cannot be dropped while a buffer names it.
use rverbs::AccessFlags;

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let buf = mr.slice(0..8);
    drop(mr);
    let _still_used = buf;
    Ok(())
}
