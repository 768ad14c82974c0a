//! Waiting for the first of several futures on any executor (the bindings' `select`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// The future of [`race`]: both futures inline, each stored once (an `async fn` taking
    /// them would keep each twice, as its argument and as its pinned local: a relay keeps
    /// one such race per idle connection).
    #[must_use = "futures do nothing unless polled"]
    pub struct Race<A, B> {
        #[pin]
        a: A,
        #[pin]
        b: B,
    }
}

impl<T, A: Future<Output = T>, B: Future<Output = T>> Future for Race<A, B> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.project();
        if let Poll::Ready(v) = this.a.poll(cx) {
            return Poll::Ready(v);
        }
        this.b.poll(cx)
    }
}

/// The output of whichever of `a` and `b` finishes first (`a` is polled first); the other
/// is dropped.
pub fn race<T, A, B>(a: A, b: B) -> Race<A, B>
where
    A: Future<Output = T>,
    B: Future<Output = T>,
{
    Race { a, b }
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
