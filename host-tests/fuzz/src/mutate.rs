//! A deterministic mutator: a seeded PRNG, byte-level mutations, interesting
//! integers, splicing, dictionary tokens and BSON-aware tweaks.

/// SplitMix64 then xorshift64*: small, fast, and the same on every machine.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const INTERESTING_I32: &[i32] = &[
    0,
    1,
    -1,
    4,
    5,
    16,
    127,
    128,
    255,
    256,
    4096,
    65535,
    65536,
    i32::MAX,
    i32::MIN,
    i32::MAX - 1,
    i32::MIN + 1,
    48_000_000,
    48_000_001,
    16 * 1024 * 1024,
];

const INTERESTING_I64: &[i64] = &[0, 1, -1, i64::MAX, i64::MIN, i64::MAX - 1, 1 << 32, 1 << 53];

const INTERESTING_F64: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    9.3e18,
    -9.3e18,
    1e300,
    f64::MAX,
    f64::MIN_POSITIVE,
];

/// The BSON element types, and a few that are not.
const BSON_TYPES: &[u8] = &[
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10,
    0x11, 0x12, 0x13, 0x7F, 0xFF, 0x00, 0x14, 0x80,
];

/// Where a BSON document's pieces are: length fields and type bytes.
#[derive(Default)]
struct Shape {
    /// Offsets of i32 length fields (documents, strings, binaries) with their value.
    lengths: Vec<(usize, i32)>,
    /// Offsets of element type bytes.
    types: Vec<usize>,
    /// Whole elements: (start, end).
    elements: Vec<(usize, usize)>,
    /// Offsets of i32 / i64 / double values.
    ints: Vec<usize>,
    longs: Vec<usize>,
    doubles: Vec<usize>,
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks the document at `at` (loosely: stops at the first thing that does not fit).
fn walk(b: &[u8], at: usize, shape: &mut Shape, depth: usize) -> Option<usize> {
    let len = usize::try_from(i32_at(b, at)?).ok()?;
    let end = at.checked_add(len)?;
    if len < 5 || end > b.len() || b[end - 1] != 0 || depth > 16 {
        return None;
    }
    shape.lengths.push((at, len as i32));
    let mut pos = at + 4;
    while pos < end - 1 {
        let start = pos;
        let t = b[pos];
        shape.types.push(pos);
        let name_end = pos + 1 + b[pos + 1..end].iter().position(|&c| c == 0)?;
        pos = name_end + 1;
        let value = pos;
        pos = match t {
            0x01 => {
                shape.doubles.push(value);
                value + 8
            }
            0x02 | 0x0D | 0x0E => {
                let l = usize::try_from(i32_at(b, value)?).ok()?;
                shape.lengths.push((value, l as i32));
                value + 4 + l
            }
            0x03 | 0x04 => walk(b, value, shape, depth + 1)?,
            0x05 => {
                let l = usize::try_from(i32_at(b, value)?).ok()?;
                shape.lengths.push((value, l as i32));
                value + 5 + l
            }
            0x06 | 0x0A | 0x7F | 0xFF => value,
            0x07 => value + 12,
            0x08 => value + 1,
            0x09 | 0x11 => {
                shape.longs.push(value);
                value + 8
            }
            0x12 => {
                shape.longs.push(value);
                value + 8
            }
            0x10 => {
                shape.ints.push(value);
                value + 4
            }
            0x13 => value + 16,
            _ => return None,
        };
        if pos > end - 1 {
            return None;
        }
        shape.elements.push((start, pos));
    }
    Some(end)
}

/// Every plausible document in `b` (any offset whose i32 ends on a 0 byte in range).
fn shape_of(b: &[u8]) -> Shape {
    let mut shape = Shape::default();
    let mut at = 0;
    while at + 5 <= b.len() {
        match walk(b, at, &mut shape, 0) {
            Some(end) => at = end,
            None => at += 1,
        }
        if shape.lengths.len() > 256 {
            break;
        }
    }
    shape
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    if at + bytes.len() <= b.len() {
        b[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

pub struct Mutator<'a> {
    pub rng: Rng,
    pub dictionary: &'a [&'a [u8]],
    pub max_len: usize,
}

impl Mutator<'_> {
    /// Applies 1 to 8 stacked mutations to `data`; `other` is for splicing.
    pub fn mutate(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        // Mostly one mutation: stacked ones mostly break what the first reached.
        let n = if self.rng.chance(2) {
            1
        } else {
            2 + self.rng.below(4)
        };
        for _ in 0..n {
            self.one(data, other);
        }
        data.truncate(self.max_len);
    }

    fn one(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        let r = &mut self.rng;
        if data.is_empty() {
            data.push(r.next_u64() as u8);
            return;
        }
        let len = data.len();
        // About half the mutations know BSON (they keep the structure).
        match r.below(22) {
            0 => {
                let at = r.below(len);
                data[at] ^= 1 << r.below(8);
            }
            1 => {
                let at = r.below(len);
                data[at] = r.next_u64() as u8;
            }
            2 => {
                let at = r.below(len + 1);
                let n = 1 + r.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
                data.splice(at..at, bytes);
            }
            3 => {
                let at = r.below(len);
                let n = 1 + r.below((len - at).min(32));
                data.drain(at..at + n);
            }
            4 => {
                // Duplicate a range somewhere else.
                let at = r.below(len);
                let n = 1 + r.below((len - at).min(64));
                let chunk = data[at..at + n].to_vec();
                let to = r.below(len + 1);
                data.splice(to..to, chunk);
            }
            5 => {
                let at = r.below(len);
                let v = INTERESTING_I32[r.below(INTERESTING_I32.len())];
                put(data, at, &v.to_le_bytes());
            }
            6 => {
                // A big-endian u16 (DNS counts, lengths and pointers).
                let at = r.below(len);
                let v: u16 = [0, 1, 2, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0xC000, 0xC00C][r.below(9)];
                put(data, at, &v.to_be_bytes());
            }
            7 => {
                // Splice: our prefix, the other input's suffix.
                if !other.is_empty() {
                    let cut = r.below(len + 1);
                    let from = r.below(other.len());
                    data.truncate(cut);
                    data.extend_from_slice(&other[from..]);
                }
            }
            8 | 9 => {
                if !self.dictionary.is_empty() {
                    let word = self.dictionary[r.below(self.dictionary.len())];
                    let at = r.below(len + 1);
                    if r.chance(2) {
                        data.splice(at..at, word.iter().copied());
                    } else {
                        let end = (at + word.len()).min(len);
                        data.splice(at..end, word.iter().copied());
                    }
                }
            }
            10 => {
                let at = r.below(len + 1);
                data.truncate(at);
            }
            _ => self.bson(data),
        }
    }

    /// Tweaks that know BSON: lengths, element types, values, whole elements.
    fn bson(&mut self, data: &mut Vec<u8>) {
        let shape = shape_of(data);
        let r = &mut self.rng;
        match r.below(6) {
            0 if !shape.lengths.is_empty() => {
                let (at, actual) = shape.lengths[r.below(shape.lengths.len())];
                let v = match r.below(4) {
                    0 => INTERESTING_I32[r.below(INTERESTING_I32.len())],
                    1 => actual.wrapping_add(1 + r.below(4) as i32),
                    2 => actual.wrapping_sub(1 + r.below(4) as i32),
                    _ => actual.wrapping_mul(2),
                };
                put(data, at, &v.to_le_bytes());
            }
            1 if !shape.types.is_empty() => {
                let at = shape.types[r.below(shape.types.len())];
                data[at] = BSON_TYPES[r.below(BSON_TYPES.len())];
            }
            2 if !shape.elements.is_empty() => {
                // Duplicate or remove an element, then fix the outer length.
                let (s, e) = shape.elements[r.below(shape.elements.len())];
                if r.chance(2) {
                    let chunk = data[s..e].to_vec();
                    data.splice(s..s, chunk);
                } else {
                    data.drain(s..e);
                }
                fix_outer_length(data);
            }
            3 if !shape.ints.is_empty() => {
                let at = shape.ints[r.below(shape.ints.len())];
                put(
                    data,
                    at,
                    &INTERESTING_I32[r.below(INTERESTING_I32.len())].to_le_bytes(),
                );
            }
            4 if !shape.longs.is_empty() => {
                let at = shape.longs[r.below(shape.longs.len())];
                put(
                    data,
                    at,
                    &INTERESTING_I64[r.below(INTERESTING_I64.len())].to_le_bytes(),
                );
            }
            5 if !shape.doubles.is_empty() => {
                let at = shape.doubles[r.below(shape.doubles.len())];
                put(
                    data,
                    at,
                    &INTERESTING_F64[r.below(INTERESTING_F64.len())].to_le_bytes(),
                );
            }
            _ => {
                let at = r.below(data.len());
                data[at] ^= 0x80;
            }
        }
    }
}

/// Sets the first i32 to the input's length (a document, or a wire frame).
pub fn fix_outer_length(data: &mut [u8]) {
    if data.len() >= 4 {
        let n = data.len() as i32;
        data[..4].copy_from_slice(&n.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let run = |seed| {
            let mut m = Mutator {
                rng: Rng::new(seed),
                dictionary: &[b"ok"],
                max_len: 4096,
            };
            let seed_doc = bson::rawdoc! { "ok": 1, "a": { "b": "c" }, "n": 5i64 };
            let mut out = Vec::new();
            for _ in 0..200 {
                let mut d = seed_doc.as_bytes().to_vec();
                m.mutate(&mut d, b"xyz");
                out.push(d);
            }
            out
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn the_walker_finds_nested_lengths_and_types() {
        let doc = bson::rawdoc! { "a": { "b": "c" }, "n": 5 };
        let s = shape_of(doc.as_bytes());
        // The outer document, the inner one and the string.
        assert_eq!(s.lengths.len(), 3);
        assert_eq!(s.types.len(), 3);
        assert_eq!(s.ints.len(), 1);
    }
}
