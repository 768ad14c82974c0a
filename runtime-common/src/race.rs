//! Waiting for the first of several futures on any executor (the bindings' `select`).

use std::future::Future;
use std::pin::pin;

use futures_util::future::{select, Either};

/// The output of whichever of `a` and `b` finishes first (`a` is polled first); the other
/// is dropped.
pub async fn race<T>(a: impl Future<Output = T>, b: impl Future<Output = T>) -> T {
    let (a, b) = (pin!(a), pin!(b));
    match select(a, b).await {
        Either::Left((v, _)) | Either::Right((v, _)) => v,
    }
}

/// A future that never finishes.
pub async fn never<T>() -> T {
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_one_wins() {
        let v = futures_util::FutureExt::now_or_never(race(never::<u8>(), async { 2 }));
        assert_eq!(v, Some(2));
        let v = futures_util::FutureExt::now_or_never(race(async { 1 }, async { 2 }));
        assert_eq!(v, Some(1));
    }
}
