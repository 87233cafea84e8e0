//! The stored forms of share groups' state (`proto/rill/partition.proto`): a share entry in the
//! partition's log and its answer, and each group's state in the partition's snapshot. Decoding
//! checks what the rules rely on — ranges sorted and apart, records in flight inside the group's
//! window and not done, counts within 16 bits — so a damaged snapshot is refused, not applied.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;
use rill_proto::partition as pb;

use crate::fetch::Isolation;

use super::{
    Ack, AckRefusal, Applied, ArchiveReason, Backoff, DeadLetter, DeadLetterWriter, InFlight, ShareCommand,
    SharePartition, ShareSettings, Tracked,
};

/// Every share group reading a partition, by group id.
pub type ShareGroups = BTreeMap<String, SharePartition>;

/// A share entry of a partition's log, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEntry {
    /// The share group.
    pub group: String,
    /// The settings the leader decided under.
    pub settings: ShareSettings,
    /// Where the group starts reading the partition when this is its first entry here.
    pub start_if_new: u64,
    /// The change; never [`ShareCommand::LogStart`], which the partition applies itself.
    pub command: ShareCommand,
}

/// Encodes `entry` as the body of a share entry (see `crate::command`); `None` for a
/// [`ShareCommand::LogStart`], which is not an entry of its own.
pub fn encode_entry(entry: &ShareEntry) -> Option<Bytes> {
    use pb::share_entry::Command;
    let (command, now_ms) = match &entry.command {
        ShareCommand::Acquire { member, acks, skipped, offsets, now_ms } => {
            let acquire = pb::ShareAcquire {
                member: member.clone(),
                offsets: offsets.clone(),
                acks: acks.iter().map(|(offset, ack)| ack_to_proto(*offset, ack)).collect(),
                skipped_starts: skipped.iter().map(|(s, _)| *s).collect(),
                skipped_ends: skipped.iter().map(|(_, e)| *e).collect(),
            };
            (Command::Acquire(acquire), *now_ms)
        }
        ShareCommand::Acknowledge { member, acks, now_ms } => {
            let acks = acks.iter().map(|(offset, ack)| ack_to_proto(*offset, ack)).collect();
            (Command::Acknowledge(pb::ShareAcknowledge { member: member.clone(), acks }), *now_ms)
        }
        ShareCommand::Expire { offsets, now_ms } => {
            let (offsets, jitter_ms) = offsets.iter().copied().unzip();
            (Command::Expire(pb::ShareExpire { offsets, jitter_ms }), *now_ms)
        }
        ShareCommand::ReleaseMember { member, now_ms } => (Command::ReleaseMember(member.clone()), *now_ms),
        ShareCommand::DeadLettered { producer_id, first_sequence, count } => {
            let copied =
                pb::ShareDeadLettered { producer_id: *producer_id, first_sequence: *first_sequence, count: *count };
            (Command::DeadLettered(copied), 0)
        }
        ShareCommand::PinDeadLetterWriter { writer, replaces } => {
            let pin = pb::ShareDeadLetterPin {
                writer: Some(writer_to_proto(writer)),
                replaces_none: replaces.is_none(),
                replaces: replaces.unwrap_or(0),
            };
            (Command::PinDeadLetterWriter(pin), 0)
        }
        ShareCommand::LogStart { .. } => return None,
    };
    let body = pb::ShareEntry {
        group: entry.group.clone(),
        settings: Some(settings_to_proto(&entry.settings)),
        start_if_new: entry.start_if_new,
        now_ms,
        command: Some(command),
    };
    Some(body.encode_to_vec().into())
}

/// Decodes the body of a share entry.
pub fn decode_entry(body: &[u8]) -> Result<ShareEntry, String> {
    use pb::share_entry::Command;
    let e = pb::ShareEntry::decode(body).map_err(|e| format!("undecodable share entry: {e}"))?;
    let settings = settings_from_proto(e.settings.as_ref().ok_or("a share entry without settings")?)?;
    let now_ms = e.now_ms;
    let command = match e.command.ok_or("a share entry without a command")? {
        Command::Acquire(a) => {
            if a.skipped_starts.len() != a.skipped_ends.len() {
                return Err(format!(
                    "a share acquisition of {} skipped starts and {} ends",
                    a.skipped_starts.len(),
                    a.skipped_ends.len()
                ));
            }
            ShareCommand::Acquire {
                acks: a.acks.iter().map(ack_from_proto).collect::<Result<_, _>>()?,
                skipped: a.skipped_starts.into_iter().zip(a.skipped_ends).collect(),
                member: a.member,
                offsets: a.offsets,
                now_ms,
            }
        }
        Command::Acknowledge(a) => ShareCommand::Acknowledge {
            member: a.member,
            acks: a.acks.iter().map(ack_from_proto).collect::<Result<_, _>>()?,
            now_ms,
        },
        Command::Expire(x) => {
            if x.offsets.len() != x.jitter_ms.len() {
                return Err(format!("a share expiry of {} offsets and {} jitters", x.offsets.len(), x.jitter_ms.len()));
            }
            ShareCommand::Expire { offsets: x.offsets.into_iter().zip(x.jitter_ms).collect(), now_ms }
        }
        Command::ReleaseMember(member) => ShareCommand::ReleaseMember { member, now_ms },
        Command::DeadLettered(d) => {
            ShareCommand::DeadLettered { producer_id: d.producer_id, first_sequence: d.first_sequence, count: d.count }
        }
        Command::PinDeadLetterWriter(pin) => ShareCommand::PinDeadLetterWriter {
            writer: writer_from_proto(pin.writer.as_ref().ok_or("a dead-letter writer pin without a writer")?)?,
            replaces: (!pin.replaces_none).then_some(pin.replaces),
        },
    };
    Ok(ShareEntry { group: e.group, settings, start_if_new: e.start_if_new, command })
}

/// Applies a share entry's `body` to `groups` on a partition whose log starts at `log_start`
/// and whose high watermark is `hw` at the entry's place in the log: the group's state is
/// created at the entry's start (not below the log start) on its first entry, and only
/// records below the high watermark are acquired. The answer, encoded; an entry that does not
/// decode changes nothing and is answered with why.
pub fn apply_entry(groups: &mut ShareGroups, body: &[u8], log_start: u64, hw: u64) -> Bytes {
    let answer = match decode_entry(body) {
        Ok(mut entry) => {
            if let ShareCommand::Acquire { offsets, skipped, .. } = &mut entry.command {
                offsets.retain(|&o| o < hw);
                skipped.retain_mut(|(from, to)| {
                    *to = (*to).min(hw);
                    from < to
                });
            }
            let state = groups
                .entry(entry.group)
                .or_insert_with(|| SharePartition::starting_at(entry.start_if_new.max(log_start)));
            state.set_settings(&entry.settings);
            applied_to_proto(&state.apply(&entry.command, &entry.settings))
        }
        Err(error) => pb::ShareApplied { error, ..Default::default() },
    };
    answer.encode_to_vec().into()
}

/// Decodes a share entry's answer.
pub fn decode_applied(answer: &[u8]) -> Result<Applied, String> {
    let a = pb::ShareApplied::decode(answer).map_err(|e| format!("undecodable share answer: {e}"))?;
    if !a.error.is_empty() {
        return Err(a.error);
    }
    if a.acquired.len() != a.acquired_counts.len()
        || a.refused.len() != a.refused_expired.len()
        || a.archived.len() != a.archived_rejected.len()
        || a.archived.len() != a.archived_reasons.len()
    {
        return Err("a share answer's lists differ in length".into());
    }
    let count = |c: u32| u16::try_from(c).map_err(|_| format!("a delivery count of {c}"));
    Ok(Applied {
        acquired: a
            .acquired
            .iter()
            .zip(&a.acquired_counts)
            .map(|(o, c)| Ok((*o, count(*c)?)))
            .collect::<Result<_, String>>()?,
        refused: a
            .refused
            .iter()
            .zip(&a.refused_expired)
            .map(|(o, expired)| (*o, if *expired { AckRefusal::LockExpired } else { AckRefusal::NotHeld }))
            .collect(),
        archived: a
            .archived
            .iter()
            .zip(a.archived_rejected.iter().zip(&a.archived_reasons))
            .map(|(o, (rejected, reason))| {
                (*o, if *rejected { ArchiveReason::Rejected(reason.clone()) } else { ArchiveReason::DeliveryLimit })
            })
            .collect(),
    })
}

fn applied_to_proto(a: &Applied) -> pb::ShareApplied {
    pb::ShareApplied {
        acquired: a.acquired.iter().map(|(o, _)| *o).collect(),
        acquired_counts: a.acquired.iter().map(|(_, c)| u32::from(*c)).collect(),
        refused: a.refused.iter().map(|(o, _)| *o).collect(),
        refused_expired: a.refused.iter().map(|(_, r)| *r == AckRefusal::LockExpired).collect(),
        archived: a.archived.iter().map(|(o, _)| *o).collect(),
        archived_rejected: a.archived.iter().map(|(_, r)| matches!(r, ArchiveReason::Rejected(_))).collect(),
        archived_reasons: a
            .archived
            .iter()
            .map(|(_, r)| match r {
                ArchiveReason::Rejected(why) => why.clone(),
                ArchiveReason::DeliveryLimit => String::new(),
            })
            .collect(),
        error: String::new(),
    }
}

fn ack_to_proto(offset: u64, ack: &Ack) -> pb::ShareAck {
    use pb::share_ack::Kind;
    let base = pb::ShareAck { offset, ..Default::default() };
    match ack {
        Ack::Accept => pb::ShareAck { kind: Kind::Accept as i32, ..base },
        Ack::Release { delay_ms } => pb::ShareAck { kind: Kind::Release as i32, delay_ms: *delay_ms, ..base },
        Ack::Reject { reason } => pb::ShareAck { kind: Kind::Reject as i32, reason: reason.clone(), ..base },
        Ack::Renew => pb::ShareAck { kind: Kind::Renew as i32, ..base },
    }
}

fn ack_from_proto(a: &pb::ShareAck) -> Result<(u64, Ack), String> {
    use pb::share_ack::Kind;
    let ack = match Kind::try_from(a.kind).map_err(|_| format!("unknown acknowledgement kind {}", a.kind))? {
        Kind::Accept => Ack::Accept,
        Kind::Release => Ack::Release { delay_ms: a.delay_ms },
        Kind::Reject => Ack::Reject { reason: a.reason.clone() },
        Kind::Renew => Ack::Renew,
    };
    Ok((a.offset, ack))
}

/// The stored form of `s`.
pub fn settings_to_proto(s: &ShareSettings) -> pb::ShareSettings {
    pb::ShareSettings {
        lock_ms: s.lock_ms,
        delivery_limit: u32::from(s.delivery_limit),
        max_in_flight: s.max_in_flight,
        max_per_member: s.max_per_member,
        backoff_initial_ms: s.backoff.initial_ms,
        backoff_max_ms: s.backoff.max_ms,
        read_uncommitted: s.isolation == Isolation::ReadUncommitted,
        dead_letter_topic: s.dead_letter_topic.clone().unwrap_or_default(),
    }
}

fn writer_to_proto(w: &DeadLetterWriter) -> pb::ShareDeadLetterWriter {
    pb::ShareDeadLetterWriter {
        producer_id: w.producer_id,
        producer_epoch: i32::from(w.producer_epoch),
        topic: w.topic.clone(),
        partition: w.partition,
    }
}

fn writer_from_proto(w: &pb::ShareDeadLetterWriter) -> Result<DeadLetterWriter, String> {
    let producer_epoch =
        i16::try_from(w.producer_epoch).map_err(|_| format!("a dead-letter producer epoch of {}", w.producer_epoch))?;
    if w.producer_id < 0 || producer_epoch < 0 || w.topic.is_empty() {
        return Err(format!("a dead-letter writer {} (epoch {producer_epoch}) for {:?}", w.producer_id, w.topic));
    }
    Ok(DeadLetterWriter { producer_id: w.producer_id, producer_epoch, topic: w.topic.clone(), partition: w.partition })
}

fn dead_letter_to_proto(d: &DeadLetter) -> pb::ShareDeadLetter {
    let (rejected, reason) = match &d.reason {
        ArchiveReason::Rejected(why) => (true, why.clone()),
        ArchiveReason::DeliveryLimit => (false, String::new()),
    };
    pb::ShareDeadLetter {
        offset: d.offset,
        rejected,
        reason,
        delivery_count: u32::from(d.delivery_count),
        first_delivery_ms: d.first_delivery_ms,
        last_delivery_ms: d.last_delivery_ms,
    }
}

fn dead_letter_from_proto(d: &pb::ShareDeadLetter) -> Result<DeadLetter, String> {
    let delivery_count =
        u16::try_from(d.delivery_count).map_err(|_| format!("a delivery count of {}", d.delivery_count))?;
    Ok(DeadLetter {
        offset: d.offset,
        reason: if d.rejected { ArchiveReason::Rejected(d.reason.clone()) } else { ArchiveReason::DeliveryLimit },
        delivery_count,
        first_delivery_ms: d.first_delivery_ms,
        last_delivery_ms: d.last_delivery_ms,
    })
}

/// Reads stored settings.
pub fn settings_from_proto(p: &pb::ShareSettings) -> Result<ShareSettings, String> {
    let delivery_limit =
        u16::try_from(p.delivery_limit).map_err(|_| format!("a delivery limit of {}", p.delivery_limit))?;
    if delivery_limit == 0 {
        return Err("a delivery limit of 0".into());
    }
    Ok(ShareSettings {
        lock_ms: p.lock_ms,
        delivery_limit,
        max_in_flight: p.max_in_flight,
        max_per_member: p.max_per_member,
        backoff: Backoff { initial_ms: p.backoff_initial_ms, max_ms: p.backoff_max_ms },
        dead_letter_topic: (!p.dead_letter_topic.is_empty()).then(|| p.dead_letter_topic.clone()),
        isolation: if p.read_uncommitted { Isolation::ReadUncommitted } else { Isolation::ReadCommitted },
    })
}

impl SharePartition {
    /// The stored form, for the partition's snapshot.
    pub fn to_proto(&self, group: &str) -> pb::ShareGroupState {
        pb::ShareGroupState {
            group: group.to_string(),
            start_offset: self.start,
            end_offset: self.end,
            in_flight: self.in_flight.iter().map(|(offset, t)| record_to_proto(*offset, t)).collect(),
            done_starts: self.done.keys().copied().collect(),
            done_ends: self.done.values().copied().collect(),
            settings: Some(settings_to_proto(&self.settings)),
            dead_letter_writer: self.writer.as_ref().map(writer_to_proto),
            dead_letter_sequence: self.dead_letter_sequence,
            dead_letters: self.dead_letters.iter().map(dead_letter_to_proto).collect(),
        }
    }

    /// Reads the stored form, checking that it is one the rules could have made.
    pub fn from_proto(p: &pb::ShareGroupState) -> Result<Self, String> {
        let group = &p.group;
        if p.end_offset < p.start_offset || p.done_starts.len() != p.done_ends.len() {
            return Err(format!("share group {group}: a malformed window or done ranges"));
        }
        let mut done = BTreeMap::new();
        let mut previous_end = p.start_offset;
        for (&s, &e) in p.done_starts.iter().zip(&p.done_ends) {
            // Apart from each other and from the start (coalesced), inside the window.
            if s <= previous_end || e <= s || e > p.end_offset {
                return Err(format!("share group {group}: done range {s}..{e} out of order or outside its window"));
            }
            done.insert(s, e);
            previous_end = e;
        }
        let settings = match &p.settings {
            Some(s) => settings_from_proto(s).map_err(|e| format!("share group {group}: {e}"))?,
            None => ShareSettings::default(),
        };
        let writer = match &p.dead_letter_writer {
            Some(w) => Some(writer_from_proto(w).map_err(|e| format!("share group {group}: {e}"))?),
            None => None,
        };
        if p.dead_letter_sequence < 0 {
            return Err(format!("share group {group}: a dead-letter sequence of {}", p.dead_letter_sequence));
        }
        let dead_letters = p
            .dead_letters
            .iter()
            .map(dead_letter_from_proto)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("share group {group}: {e}"))?;
        let mut state = Self {
            start: p.start_offset,
            end: p.end_offset,
            in_flight: BTreeMap::new(),
            done,
            settings,
            writer,
            dead_letter_sequence: p.dead_letter_sequence,
            dead_letters,
        };
        for r in &p.in_flight {
            if r.offset < state.start || r.offset >= state.end || state.is_done(r.offset) {
                return Err(format!("share group {group}: record {} in flight outside its window or done", r.offset));
            }
            let t = record_from_proto(r).map_err(|e| format!("share group {group}: record {}: {e}", r.offset))?;
            state.in_flight.insert(r.offset, t);
        }
        // A record waiting for its copy in flight is in the queue (which counts it).
        let waiting: std::collections::BTreeSet<u64> = state.dead_letters.iter().map(|d| d.offset).collect();
        if let Some((o, _)) =
            state.in_flight.iter().find(|(o, t)| matches!(t.state, InFlight::DeadLettering(_)) && !waiting.contains(o))
        {
            return Err(format!("share group {group}: record {o} waits for a dead-letter copy it is not queued for"));
        }
        Ok(state)
    }
}

fn record_to_proto(offset: u64, t: &Tracked) -> pb::ShareRecord {
    let mut r = pb::ShareRecord {
        offset,
        delivery_count: u32::from(t.delivery_count),
        first_delivery_ms: t.first_delivery_ms,
        last_delivery_ms: t.last_delivery_ms,
        ..Default::default()
    };
    match &t.state {
        InFlight::Available => r.state = pb::ShareRecordState::ShareAvailable as i32,
        InFlight::Acquired { member, lock_until_ms } => {
            r.state = pb::ShareRecordState::ShareAcquired as i32;
            r.member = member.clone();
            r.until_ms = *lock_until_ms;
        }
        InFlight::Delayed { until_ms } => {
            r.state = pb::ShareRecordState::ShareDelayed as i32;
            r.until_ms = *until_ms;
        }
        InFlight::DeadLettering(reason) => {
            r.state = pb::ShareRecordState::ShareDeadLettering as i32;
            if let ArchiveReason::Rejected(why) = reason {
                r.rejected = true;
                r.reason = why.clone();
            }
        }
    }
    r
}

fn record_from_proto(r: &pb::ShareRecord) -> Result<Tracked, String> {
    let delivery_count =
        u16::try_from(r.delivery_count).map_err(|_| format!("a delivery count of {}", r.delivery_count))?;
    if delivery_count == 0 {
        return Err("in flight but never delivered".into());
    }
    let state = match pb::ShareRecordState::try_from(r.state).map_err(|_| format!("unknown state {}", r.state))? {
        pb::ShareRecordState::ShareAvailable => InFlight::Available,
        pb::ShareRecordState::ShareAcquired => {
            InFlight::Acquired { member: r.member.clone(), lock_until_ms: r.until_ms }
        }
        pb::ShareRecordState::ShareDelayed => InFlight::Delayed { until_ms: r.until_ms },
        pb::ShareRecordState::ShareDeadLettering => InFlight::DeadLettering(if r.rejected {
            ArchiveReason::Rejected(r.reason.clone())
        } else {
            ArchiveReason::DeliveryLimit
        }),
    };
    Ok(Tracked { state, delivery_count, first_delivery_ms: r.first_delivery_ms, last_delivery_ms: r.last_delivery_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ShareSettings {
        ShareSettings { lock_ms: 1_000, delivery_limit: 3, dead_letter_topic: Some("dlq".into()), ..Default::default() }
    }

    fn entry(command: ShareCommand) -> ShareEntry {
        ShareEntry { group: "jobs".into(), settings: settings(), start_if_new: 0, command }
    }

    #[test]
    fn entries_round_trip_and_a_log_start_is_not_an_entry() {
        let commands = [
            ShareCommand::Acquire {
                member: "m".into(),
                acks: vec![(0, Ack::Accept), (4, Ack::Release { delay_ms: 2 })],
                skipped: vec![(3, 4), (7, 9)],
                offsets: vec![1, 2],
                now_ms: 5,
            },
            ShareCommand::Acknowledge {
                member: "m".into(),
                acks: vec![
                    (1, Ack::Accept),
                    (2, Ack::Release { delay_ms: 9 }),
                    (3, Ack::Reject { reason: "bad".into() }),
                    (4, Ack::Renew),
                ],
                now_ms: 6,
            },
            ShareCommand::Expire { offsets: vec![(1, 3), (2, 0)], now_ms: 7 },
            ShareCommand::ReleaseMember { member: "m".into(), now_ms: 8 },
            ShareCommand::DeadLettered { producer_id: 4, first_sequence: 7, count: 2 },
            ShareCommand::PinDeadLetterWriter {
                writer: DeadLetterWriter { producer_id: 4, producer_epoch: 0, topic: "dlq".into(), partition: 2 },
                replaces: None,
            },
            ShareCommand::PinDeadLetterWriter {
                writer: DeadLetterWriter { producer_id: 5, producer_epoch: 1, topic: "dlq".into(), partition: 0 },
                replaces: Some(4),
            },
        ];
        for command in commands {
            let e = entry(command);
            assert_eq!(decode_entry(&encode_entry(&e).unwrap()), Ok(e));
        }
        assert!(encode_entry(&entry(ShareCommand::LogStart { log_start: 3 })).is_none());
        assert!(decode_entry(b"\xff\xff").is_err());
    }

    #[test]
    fn an_entry_applies_to_its_group_created_at_its_start_and_answers_what_it_did() {
        let mut groups = ShareGroups::new();
        let acquire = entry(ShareCommand::Acquire {
            member: "m".into(),
            acks: vec![],
            skipped: vec![(5, 12)],
            offsets: vec![3, 4, 12],
            now_ms: 0,
        });
        let answer =
            apply_entry(&mut groups, &encode_entry(&ShareEntry { start_if_new: 3, ..acquire }).unwrap(), 0, 10);
        assert_eq!(decode_applied(&answer).unwrap().acquired, vec![(3, 1), (4, 1)], "none at or past the HW");
        assert_eq!(groups["jobs"].start_offset(), 3);
        assert_eq!(groups["jobs"].end_offset(), 10, "skipped up to the HW only");
        assert_eq!(groups["jobs"].settings(), &settings(), "the entry's settings kept");
        let late = entry(ShareCommand::Acknowledge { member: "m".into(), acks: vec![(3, Ack::Accept)], now_ms: 2_000 });
        let answer = apply_entry(&mut groups, &encode_entry(&late).unwrap(), 0, 10);
        assert_eq!(decode_applied(&answer).unwrap().refused, vec![(3, AckRefusal::LockExpired)]);
        let broken = apply_entry(&mut groups, b"\x0a", 0, 10);
        assert!(decode_applied(&broken).is_err(), "an undecodable entry is answered with why");
    }

    #[test]
    fn a_group_state_round_trips_and_a_damaged_one_is_refused() {
        let s = settings();
        let mut p = SharePartition::starting_at(10);
        let acquire = ShareCommand::Acquire {
            member: "a".into(),
            acks: vec![],
            skipped: vec![],
            offsets: (10..16).collect(),
            now_ms: 0,
        };
        p.apply(&acquire, &s);
        p.set_settings(&s);
        let acks = vec![
            (11, Ack::Accept),
            (12, Ack::Release { delay_ms: 50 }),
            (13, Ack::Reject { reason: "bad".into() }),
            (15, Ack::Release { delay_ms: 0 }),
        ];
        p.apply(&ShareCommand::Acknowledge { member: "a".into(), acks, now_ms: 1 }, &s);
        let stored = p.to_proto("jobs");
        assert_eq!(SharePartition::from_proto(&stored), Ok(p.clone()));

        let overlapping = pb::ShareGroupState { done_starts: vec![11, 11], done_ends: vec![12, 12], ..stored.clone() };
        assert!(SharePartition::from_proto(&overlapping).is_err());
        let mut done_and_in_flight = stored.clone();
        done_and_in_flight.in_flight[0].offset = 11;
        assert!(SharePartition::from_proto(&done_and_in_flight).is_err());
        let mut never_delivered = stored;
        never_delivered.in_flight[0].delivery_count = 0;
        assert!(SharePartition::from_proto(&never_delivered).is_err());
    }
}
