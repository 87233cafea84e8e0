//! The determinism seam.
//!
//! Rill's node code never touches tokio's executor, clocks, sleeping or randomness directly: it
//! calls this crate. In a normal build these are thin wrappers over tokio and `rand`; under
//! `--cfg madsim` the same calls go to madsim's deterministic, seeded scheduler, so a whole
//! cluster runs in one process and a seed replays exactly.
//!
//! ```text
//!   node code ──► rill_rt::{spawn, sleep, timeout, now, wall_clock_ms, random_u64, blocking}
//!                      │ cfg(not(madsim))          │ cfg(madsim)
//!                      ▼                           ▼
//!                 tokio + rand::thread_rng    madsim task/time + GlobalRng
//! ```
//!
//! This is the only crate (besides the simulation harness) that says `cfg(madsim)`.

pub mod mutation;
pub mod probe;

use std::future::Future;
use std::time::Duration;

pub use tokio::sync;
pub use tokio::task::{JoinError, JoinHandle};
pub use tokio::time::{Instant, Sleep};

/// The random number generator type returned by [`rng`].
#[cfg(madsim)]
pub type Rng = madsim::rand::GlobalRng;
/// The random number generator type returned by [`rng`].
#[cfg(not(madsim))]
pub type Rng = rand::rngs::ThreadRng;

/// Spawns a task on the current runtime (on the current simulated node under madsim).
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future)
}

/// Sleeps for `duration` of (possibly simulated) time.
pub async fn sleep(duration: Duration) {
    tokio::time::sleep(duration).await
}

/// A sleep future that can be stored in a struct.
pub fn sleep_future(duration: Duration) -> Sleep {
    tokio::time::sleep(duration)
}

/// Sleeps until `deadline`.
pub async fn sleep_until(deadline: Instant) {
    tokio::time::sleep_until(deadline).await
}

/// The error of [`timeout`]: the deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `future` until it completes or `duration` passes.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Result<F::Output, Elapsed> {
    tokio::time::timeout(duration, future).await.map_err(|_| Elapsed)
}

/// Runs `future` until it completes or `deadline` passes.
pub async fn timeout_at<F: Future>(deadline: Instant, future: F) -> Result<F::Output, Elapsed> {
    // madsim has no `timeout_at`; a deadline is a timeout from now on both runtimes.
    timeout(deadline.saturating_duration_since(now()), future).await
}

/// The monotonic clock.
pub fn now() -> Instant {
    #[allow(clippy::disallowed_methods)] // this is the one sanctioned monotonic clock read
    Instant::now()
}

/// Milliseconds since the Unix epoch on this node's wall clock (simulated under madsim).
pub fn wall_clock_ms() -> i64 {
    #[allow(clippy::disallowed_methods)] // this is the one sanctioned wall-clock read
    let now = std::time::SystemTime::now();
    match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// A random number generator: thread-local entropy in a normal build, the simulation's seeded
/// generator under madsim.
pub fn rng() -> Rng {
    #[cfg(madsim)]
    {
        madsim::rand::thread_rng()
    }
    #[cfg(not(madsim))]
    {
        #[allow(clippy::disallowed_methods)] // this is the one sanctioned entropy source
        rand::thread_rng()
    }
}

/// A uniformly random `u64`.
pub fn random_u64() -> u64 {
    use rand::Rng as _;
    rng().gen()
}

/// Runs a blocking closure (a disk sync, say) without stalling the async executor.
///
/// Real builds hand it to tokio's blocking pool; under madsim, where OS threads are forbidden and
/// the in-memory storage engine never blocks, it runs inline.
pub async fn blocking<F, R>(f: F) -> R
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    #[cfg(madsim)]
    {
        f()
    }
    #[cfg(not(madsim))]
    {
        match tokio::task::spawn_blocking(f).await {
            Ok(r) => r,
            // The closure panicked: surface the same panic on the caller's task.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// True when compiled for the deterministic simulation.
pub const SIMULATION: bool = cfg!(madsim);
