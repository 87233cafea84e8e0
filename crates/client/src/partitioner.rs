//! Kafka's default partitioner for keyed records: `murmur2(key) & 0x7fffffff % partitions`,
//! bit for bit as in Kafka's Java client (`org.apache.kafka.common.utils.Utils.murmur2`), so a
//! key lands in the same partition number as it would with Kafka.

/// Kafka's murmur2 hash of `data` (seed `0x9747b28c`).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len() as u32;
    let mut h: u32 = SEED ^ length;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for `key` among `partitions` (> 0).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafka_utils_test_vectors() {
        // From Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn partitions_are_positive_modulo() {
        for key in [&b"21"[..], b"foobar", b"abc", b""] {
            for n in [1, 3, 7, 100] {
                assert!(partition_for_key(key, n) < n);
            }
        }
        assert_eq!(partition_for_key(b"21", 1), 0);
    }
}
