// Regions hold bytes only: a peer's writes can never forge a pointer in a typed value.
use rverbs::AccessFlags;

fn main() -> rverbs::Result<()> {
    let ctx = rverbs::device(None)?.open()?;
    let pd = ctx.alloc_pd()?;
    let _mr = pd.reg_mr_from(vec![String::new()], AccessFlags::ALL)?;
    Ok(())
}
