//! `Verifying`: one verification at a time per producer epoch and leader term, shared by
//! the transactional batches that arrive while it is under way.
//!
//! A producer sends up to five batches to a partition before the first is acknowledged, so the
//! first batches of a transaction reach the leader together, each before any of them opened the
//! transaction here — and each would ask the transaction coordinator (KIP-890's verification)
//! on its own: five requests, five answers, and five copies of the marker the partition is owed
//! by the producer's previous transaction, for one fact. Instead the first asks, and the others
//! wait for its answer and act on it as if they had asked at the same moment: the answer is
//! about the producer id and epoch, not the batch, and each batch still checks it under the
//! gate against the markers applied or proposed since it was asked for
//! (`Partition::guard_transactional`). When the asker fails (or gives up), each waiting batch
//! asks on its own, as before.
//!
//! Leader-local and in memory: nothing here is replicated; a new term starts with none.

use std::collections::HashMap;
use std::sync::Mutex;

use rill_rt::sync::watch;
use rill_rt::Instant;

/// Who asks: a producer id and epoch, under one leader term.
type Key = (u64, i64, i16);

/// The verifications under way at one partition's leader (see the module docs).
#[derive(Debug)]
pub(crate) struct Verifying<T> {
    asking: Mutex<HashMap<Key, Asker<T>>>,
}

impl<T> Default for Verifying<T> {
    fn default() -> Self {
        Self { asking: Mutex::new(HashMap::new()) }
    }
}

#[derive(Debug)]
struct Asker<T> {
    answer: watch::Receiver<Option<T>>,
}

/// What a batch does about verification.
pub(crate) enum Turn<'a, T> {
    /// Nobody is asking: this batch asks, and hands its answer to those that wait.
    Ask(Asking<'a, T>),
    /// Another batch is asking: this is its answer, `None` when it failed or gave up.
    Answered(Option<T>),
}

/// The hold of the batch that asks; dropping it (answered or not) ends the verification.
pub(crate) struct Asking<'a, T> {
    verifying: &'a Verifying<T>,
    key: Key,
    answer: watch::Sender<Option<T>>,
}

impl<T: Clone> Verifying<T> {
    /// Joins the verification of `(term, producer_id, epoch)` under way, waiting for its answer
    /// until `deadline`, or begins one.
    pub(crate) async fn join(&self, term: u64, producer_id: i64, epoch: i16, deadline: Instant) -> Turn<'_, T> {
        let key = (term, producer_id, epoch);
        let mut answer = {
            let mut asking = lock(&self.asking);
            match asking.get(&key) {
                Some(asker) => asker.answer.clone(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    asking.insert(key, Asker { answer: rx });
                    return Turn::Ask(Asking { verifying: self, key, answer: tx });
                }
            }
        };
        loop {
            if let Some(answered) = answer.borrow_and_update().clone() {
                return Turn::Answered(Some(answered));
            }
            match rill_rt::timeout_at(deadline, answer.changed()).await {
                Ok(Ok(())) => {}
                // The asker ended without an answer, or the deadline passed: on its own.
                Ok(Err(_)) | Err(_) => return Turn::Answered(None),
            }
        }
    }

    /// How many verifications are under way.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.asking).len()
    }
}

impl<T> Asking<'_, T> {
    /// Hands `answer` to the batches waiting for it, and ends the verification.
    pub(crate) fn answer(self, answer: T) {
        self.answer.send_replace(Some(answer));
    }
}

impl<T> Drop for Asking<'_, T> {
    fn drop(&mut self) {
        // Only its own entry: a later asker of the same key may have registered since.
        let mut asking = lock(&self.verifying.asking);
        if asking.get(&self.key).is_some_and(|a| a.answer.same_channel(&self.answer.subscribe())) {
            asking.remove(&self.key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon() -> Instant {
        rill_rt::now() + Duration::from_secs(5)
    }

    #[tokio::test]
    async fn batches_arriving_meanwhile_share_the_answer() {
        let v = Verifying::<u64>::default();
        let Turn::Ask(asking) = v.join(1, 7, 0, soon()).await else { panic!("the first batch asks") };
        let waiter = async { v.join(1, 7, 0, soon()).await };
        let answer = async {
            rill_rt::sleep(Duration::from_millis(10)).await;
            asking.answer(42);
        };
        let (turn, ()) = tokio::join!(waiter, answer);
        assert!(matches!(turn, Turn::Answered(Some(42))));
        assert_eq!(v.len(), 0, "an answered verification ends");
    }

    #[tokio::test]
    async fn a_failed_asker_sends_the_waiting_batches_to_ask_on_their_own() {
        let v = Verifying::<u64>::default();
        let Turn::Ask(asking) = v.join(1, 7, 0, soon()).await else { panic!("the first batch asks") };
        let waiter = async { v.join(1, 7, 0, soon()).await };
        let fail = async {
            rill_rt::sleep(Duration::from_millis(10)).await;
            drop(asking);
        };
        let (turn, ()) = tokio::join!(waiter, fail);
        assert!(matches!(turn, Turn::Answered(None)));
        assert!(matches!(v.join(1, 7, 0, soon()).await, Turn::Ask(_)), "the next batch asks again");
    }

    #[tokio::test]
    async fn other_epochs_and_terms_ask_for_themselves() {
        let v = Verifying::<u64>::default();
        let _a = v.join(1, 7, 0, soon()).await;
        assert!(matches!(v.join(1, 7, 1, soon()).await, Turn::Ask(_)));
        assert!(matches!(v.join(2, 7, 0, soon()).await, Turn::Ask(_)));
        assert!(matches!(v.join(1, 8, 0, soon()).await, Turn::Ask(_)));
    }
}
