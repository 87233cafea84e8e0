//! Zigzag varints, as Kafka's records use them (protobuf's `sint32`/`sint64`).

use bytes::BufMut;

/// Appends `v` as a zigzag varlong.
pub fn put_varlong(out: &mut impl BufMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// Appends `v` as a zigzag varint (the same bytes as a varlong of the same value).
pub fn put_varint(out: &mut impl BufMut, v: i32) {
    put_varlong(out, i64::from(v));
}

/// Bytes `v` takes as a zigzag varlong.
pub fn varlong_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - z.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

/// Bytes `v` takes as a zigzag varint.
pub fn varint_len(v: i32) -> usize {
    varlong_len(i64::from(v))
}

/// Reads a zigzag varlong at `*pos` of `data`, advancing `*pos`. `None` when truncated or longer
/// than ten bytes.
pub fn get_varlong(data: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for i in 0..10 {
        let b = *data.get(*pos)?;
        *pos += 1;
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// Reads a zigzag varint (at most five bytes, in `i32` range).
pub fn get_varint(data: &[u8], pos: &mut usize) -> Option<i32> {
    let start = *pos;
    let v = get_varlong(data, pos)?;
    if *pos - start > 5 {
        return None;
    }
    i32::try_from(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_kafkas_encoding() {
        // Kafka's ByteUtils: writeVarint(0) = 00, (-1) = 01, (1) = 02, (63) = 7e, (64) = 80 01.
        for (v, bytes) in [(0i64, vec![0u8]), (-1, vec![1]), (1, vec![2]), (63, vec![0x7e]), (64, vec![0x80, 1])] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(varlong_len(v), bytes.len());
        }
        for v in [0i64, 1, -1, 300, -300, i64::from(i32::MAX), i64::from(i32::MIN), i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            assert_eq!(get_varlong(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        let mut pos = 0;
        assert_eq!(get_varlong(&[0x80, 0x80], &mut pos), None, "truncated");
        let mut pos = 0;
        assert_eq!(get_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01], &mut pos), None, "six bytes is no varint");
        let mut big = Vec::new();
        put_varlong(&mut big, i64::from(i32::MAX) + 1);
        let mut pos = 0;
        assert_eq!(get_varint(&big, &mut pos), None, "out of i32 range");
    }
}
