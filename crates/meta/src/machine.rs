//! [`MetaStateMachine`]: group 0's state machine. Publishes every new state on a watch channel
//! so the node can start and stop replicas to match.

use std::sync::Arc;

use bytes::Bytes;
use rill_raft::types::LogId;
use rill_raft::{GroupStateMachine, Payload};
use rill_rt::sync::watch;

use crate::error::{MetaError, MetaErrorKind};
use crate::state::{MetaResult, MetaState};

/// Group 0's state machine.
pub struct MetaStateMachine {
    state: MetaState,
    tx: watch::Sender<Arc<MetaState>>,
}

impl MetaStateMachine {
    /// A fresh state machine and the receiver that sees every applied state.
    pub fn new() -> (Self, watch::Receiver<Arc<MetaState>>) {
        let (tx, rx) = watch::channel(Arc::new(MetaState::default()));
        (Self { state: MetaState::default(), tx }, rx)
    }

    fn publish(&self) {
        self.tx.send_replace(Arc::new(self.state.clone()));
    }
}

pub use crate::codec::{decode_command, decode_result, encode_command, encode_result};

impl GroupStateMachine for MetaStateMachine {
    fn apply(&mut self, log_id: &LogId, _base: u64, payload: &Payload) -> Bytes {
        let result = match decode_command(&payload.body) {
            Ok(cmd) => self.state.apply(cmd),
            Err(e) => {
                // Every node refuses the same bytes the same way; the state does not change.
                tracing::error!(index = log_id.index, error = %e, "undecodable metadata command");
                MetaResult::Refused(MetaError::new(
                    MetaErrorKind::InvalidConfig,
                    format!("undecodable metadata command: {e}"),
                ))
            }
        };
        self.publish();
        encode_result(&result)
    }

    fn snapshot(&self) -> Result<Bytes, String> {
        Ok(crate::codec::encode_state(&self.state))
    }

    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        self.state = crate::codec::decode_state(data)?;
        self.publish();
        Ok(())
    }
}
