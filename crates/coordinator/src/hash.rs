//! Which partition of an internal topic an id belongs to.
//!
//! Kafka's rule, so an id lands where Kafka would put it given the same partition count:
//! `abs(hashCode(id)) % partitions`, with Java's `String.hashCode` (over UTF-16 code units) and
//! Kafka's `Utils.abs` (`n & 0x7fffffff`).

/// Java's `String.hashCode` of `s`.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// The partition of `id` in an internal topic of `partitions` partitions (at least 1).
pub fn partition_for(id: &str, partitions: u32) -> u32 {
    let h = (java_string_hash(id) & 0x7fff_ffff) as u32;
    h % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_javas_string_hash_code() {
        // "hello" and "polygenelubricants" (Integer.MIN_VALUE) are well-known Java values; the
        // others follow its definition, s[0]*31^(n-1) + … + s[n-1] over UTF-16 units.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("my-group"), -1_906_497_762);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Outside the BMP: two UTF-16 units, as Java counts them.
        assert_eq!(java_string_hash("😀"), 1_772_899);
    }

    #[test]
    fn partitions_spread_and_stay_in_range() {
        assert_eq!(partition_for("polygenelubricants", 50), 0, "Utils.abs(MIN_VALUE) is 0");
        let mut hit = [false; 16];
        for i in 0..1000 {
            let p = partition_for(&format!("group-{i}"), 16);
            assert!(p < 16);
            hit[p as usize] = true;
        }
        assert!(hit.iter().all(|h| *h), "1000 ids reach every one of 16 partitions");
        assert_eq!(partition_for("x", 0), 0);
    }
}
