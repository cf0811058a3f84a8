// There is no way to borrow a region's bytes outside Mr::with: no Deref, no as_slice.
use rverbs::AccessFlags;

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let mr = pd.reg_mr(64, AccessFlags::ALL)?;
    let _first: u8 = mr[0];
    Ok(())
}
