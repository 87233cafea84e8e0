//! openraft's [`AsyncRuntime`], routed through `rill-rt`.
//!
//! openraft's own `TokioRuntime` calls real tokio and panics inside madsim; this one spawns,
//! sleeps and draws randomness through the determinism seam. openraft's `Instant` stays tokio's
//! instant, whose clock madsim intercepts.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft::async_runtime::AsyncOneshotSendExt;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};

/// The runtime every Rill Raft group uses.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct RtRuntime;

/// A timeout future that needs no unsafe pinning: both halves are boxed.
pub struct RtTimeout<T> {
    inner: Pin<Box<T>>,
    sleep: Pin<Box<rill_rt::Sleep>>,
}

impl<T: Future> Future for RtTimeout<T> {
    type Output = Result<T::Output, rill_rt::Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(v) = this.inner.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(rill_rt::Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A oneshot sender in openraft's shape.
pub struct RtOneshotSender<T>(rill_rt::sync::oneshot::Sender<T>);

impl<T> std::fmt::Debug for RtOneshotSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RtOneshotSender")
    }
}

impl<T: OptionalSend> AsyncOneshotSendExt<T> for RtOneshotSender<T> {
    fn send(self, t: T) -> Result<(), T> {
        self.0.send(t)
    }
}

fn until(deadline: TokioInstant) -> Duration {
    deadline.saturating_duration_since(TokioInstant::now())
}

impl AsyncRuntime for RtRuntime {
    type JoinError = rill_rt::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = rill_rt::JoinHandle<T>;
    type Sleep = Pin<Box<rill_rt::Sleep>>;
    type Instant = TokioInstant;
    type TimeoutError = rill_rt::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = RtTimeout<T>;
    type ThreadLocalRng = rill_rt::Rng;
    type OneshotSender<T: OptionalSend> = RtOneshotSender<T>;
    type OneshotReceiverError = rill_rt::sync::oneshot::error::RecvError;
    type OneshotReceiver<T: OptionalSend> = rill_rt::sync::oneshot::Receiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        rill_rt::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        Box::pin(rill_rt::sleep_future(duration))
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Box::pin(rill_rt::sleep_future(until(deadline)))
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        RtTimeout { inner: Box::pin(future), sleep: Box::pin(rill_rt::sleep_future(duration)) }
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        Self::timeout(until(deadline), future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        rill_rt::rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (tx, rx) = rill_rt::sync::oneshot::channel();
        (RtOneshotSender(tx), rx)
    }
}
