// reg_mr_from takes the Vec: the caller can no longer write, resize or free it.
use rverbs::AccessFlags;

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let mut buf = vec![0u8; 64];
    let _mr = pd.reg_mr_from(buf, AccessFlags::ALL)?;
    buf.push(1);
    Ok(())
}
