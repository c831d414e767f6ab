//! LEB128 varints and zigzag mapping, used by the chunk payload encoding.

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    // Most values fit in one or two bytes; the loop stays short for them.
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One varint in a stack buffer: the bytes and how many of them are used.
#[inline]
pub(crate) fn encode_u64(mut v: u64) -> ([u8; 10], usize) {
    let mut out = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    (out, n + 1)
}

/// Reads one varint at `*pos`, advancing it. `None` on a cut or over-long (more than 10 bytes, or
/// overflowing 64 bits) varint, so corrupt input can never be misread as a valid value.
#[inline]
pub(crate) fn get_u64(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut result: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        let low = (byte & 0x7f) as u64;
        if shift == 63 && low > 1 {
            return None;
        }
        result |= low << shift;
        if byte & 0x80 == 0 {
            return Some(result);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_the_edges() {
        let values = [
            0u64,
            1,
            127,
            128,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &values {
            put_u64(&mut buf, v);
        }
        let mut pos = 0;
        for &v in &values {
            assert_eq!(get_u64(&buf, &mut pos), Some(v));
        }
        assert_eq!(pos, buf.len());
        for &v in &values {
            let (bytes, n) = encode_u64(v);
            let mut one = Vec::new();
            put_u64(&mut one, v);
            assert_eq!(&bytes[..n], &one[..]);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -64, 64] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn overlong_and_cut_varints_are_rejected() {
        let mut pos = 0;
        assert_eq!(get_u64(&[0x80, 0x80], &mut pos), None);
        let eleven = [0xffu8; 10];
        let mut pos = 0;
        assert_eq!(get_u64(&eleven, &mut pos), None);
        // 10th byte may only carry the single top bit.
        let mut too_big = vec![0xffu8; 9];
        too_big.push(0x02);
        let mut pos = 0;
        assert_eq!(get_u64(&too_big, &mut pos), None);
    }
}
