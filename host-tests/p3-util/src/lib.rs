//! What the WASI 0.3 test guests share (std only).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Polls every future until all are done (one task, no spawn); the outputs
/// in the order given.
pub async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("joined")).collect()
}

/// `fut`, dropped where it stands when it is pending for the `n+1`-th time
/// (`None`: never); `Some(output)` if it finished first. How a test stands
/// for a host that drops a call's future at whatever await it stood.
pub struct CancelAt<F: Future> {
    fut: Option<Pin<Box<F>>>,
    left: Option<usize>,
}

impl<F: Future> Future for CancelAt<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(fut) = this.fut.as_mut() else {
            return Poll::Ready(None);
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(out) => {
                this.fut = None;
                Poll::Ready(Some(out))
            }
            Poll::Pending if this.left == Some(0) => {
                this.fut = None; // the cancellation: dropped at this await
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(n) = this.left.as_mut() {
                    *n -= 1;
                }
                Poll::Pending
            }
        }
    }
}

pub fn cancel_at<F: Future>(fut: F, n: Option<usize>) -> CancelAt<F> {
    CancelAt {
        fut: Some(Box::pin(fut)),
        left: n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending `n` times, then ready with `n`.
    struct Yields(usize, usize);

    impl Future for Yields {
        type Output = usize;
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
            if self.0 == self.1 {
                return Poll::Ready(self.1);
            }
            self.0 += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn run<F: Future>(f: F) -> F::Output {
        let mut f = Box::pin(f);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn cancel_at_drops_at_the_nth_pending_point_or_lets_it_finish() {
        assert_eq!(run(cancel_at(Yields(0, 3), Some(0))), None);
        assert_eq!(run(cancel_at(Yields(0, 3), Some(2))), None);
        assert_eq!(run(cancel_at(Yields(0, 3), Some(3))), Some(3));
        assert_eq!(run(cancel_at(Yields(0, 3), None)), Some(3));
    }

    #[test]
    fn join_all_keeps_the_order_given() {
        let got = run(join_all(vec![Yields(0, 3), Yields(0, 1), Yields(0, 2)]));
        assert_eq!(got, vec![3, 1, 2]);
    }
}
