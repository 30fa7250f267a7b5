//! OP_COMPRESSED (the Wire Compression spec), sans I/O: wrapping a whole
//! message in a compressed frame, and unwrapping one back into the message
//! it carries, header rebuilt, so the rest of `wire` never sees compression.
//!
//! Unwrapping is bounded: the announced `uncompressedSize` must fit the
//! negotiated maxMessageSizeBytes (never above [`MAX_MESSAGE_SIZE`]), the
//! output buffer is sized to it once and never grows, and a stream that
//! yields more or fewer bytes than announced is a protocol error. A few
//! bytes claiming 48 MB of zeros cost at most that one buffer; a claim zlib
//! or snappy could not produce from the bytes sent is refused before any
//! allocation.

use super::{read_i32, Header, HEADER_LEN, MAX_MESSAGE_SIZE, OP_COMPRESSED};
use crate::error::{Error, Result};

/// A wire compressor of the spec, with its handshake name and compressor id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    Snappy,
    Zlib,
    Zstd,
}

impl Compressor {
    pub const ALL: [Compressor; 3] = [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd];

    /// The name in the `compressors` URI option and the handshake.
    pub fn as_str(self) -> &'static str {
        match self {
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    pub fn from_name(name: &str) -> Option<Compressor> {
        Compressor::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The OP_COMPRESSED `compressorId` (0 is the uncompressed noop).
    pub fn id(self) -> u8 {
        match self {
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }
}

/// What a client offers: its compressors in priority order, and zlib's
/// level (`zlibCompressionLevel`, -1 for zlib's default, 0 to 9).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compression {
    pub compressors: Vec<Compressor>,
    pub zlib_level: Option<i32>,
}

impl Compression {
    /// The compressor a connection uses: the first of the client's that the
    /// handshake reply's `compression` names (none when it names none).
    pub fn negotiate(&self, hello_reply: &bson::RawDocument) -> Option<Compressor> {
        let offered = hello_reply.get_array("compression").ok()?;
        let server: Vec<&str> = offered
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        self.compressors
            .iter()
            .copied()
            .find(|c| server.contains(&c.as_str()))
    }
}

/// The commands the spec says never to compress (authentication, user
/// management and the handshake), lowercased.
const NEVER_COMPRESSED: [&str; 11] = [
    "hello",
    "ismaster",
    "saslstart",
    "saslcontinue",
    "getnonce",
    "authenticate",
    "createuser",
    "updateuser",
    "copydbsaslstart",
    "copydbgetnonce",
    "copydb",
];

/// Whether a command named `name` (its first key) may go compressed.
/// Case-insensitive: the legacy hello is `isMaster` or `ismaster`.
pub fn may_compress(name: &str) -> bool {
    !NEVER_COMPRESSED
        .iter()
        .any(|never| never.eq_ignore_ascii_case(name))
}

/// The OP_COMPRESSED fields after the header: originalOpcode,
/// uncompressedSize, compressorId.
const PREFIX_LEN: usize = 9;

/// Deflate cannot expand input by more than 1032 to 1 (a 258-byte match per
/// two bits, roughly); a larger claim is a lie, refused before allocating.
const DEFLATE_MAX_RATIO: usize = 1032;

/// Writes into `out` (cleared) the message `frame` (a whole message, header
/// included) wrapped in OP_COMPRESSED with `compressor`; `zlib_level` is
/// used by zlib only. Returns `false`, leaving `out` empty, when the
/// compressed frame would exceed `max_message_size`: the caller then sends
/// `frame` as it is.
pub fn compress(
    frame: &[u8],
    compressor: Compressor,
    zlib_level: Option<i32>,
    max_message_size: usize,
    out: &mut Vec<u8>,
) -> Result<bool> {
    let header = Header::parse(frame)?;
    let body = &frame[HEADER_LEN..];
    let uncompressed = i32::try_from(body.len())
        .map_err(|_| Error::invalid_argument("message too large to compress"))?;
    out.clear();
    // The header's length is filled in below.
    Header {
        length: 0,
        op_code: OP_COMPRESSED,
        ..header
    }
    .write(out);
    out.extend_from_slice(&header.op_code.to_le_bytes());
    out.extend_from_slice(&uncompressed.to_le_bytes());
    out.push(compressor.id());
    match compressor {
        Compressor::Snappy => {
            let start = out.len();
            out.resize(start + snap::raw::max_compress_len(body.len()), 0);
            let n = snap::raw::Encoder::new()
                .compress(body, &mut out[start..])
                .map_err(|e| Error::invalid_argument(format!("snappy compression: {e}")))?;
            out.truncate(start + n);
        }
        Compressor::Zlib => deflate_zlib(body, zlib_level.unwrap_or(-1), out),
        Compressor::Zstd => {
            ruzstd::encoding::compress(body, &mut *out, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
    if out.len() > max_message_size.min(MAX_MESSAGE_SIZE) {
        out.clear();
        return Ok(false);
    }
    let len = out.len() as i32;
    out[0..4].copy_from_slice(&len.to_le_bytes());
    Ok(true)
}

/// zlib (RFC 1950) of `input` at `level` (-1: the default, 6), appended to `out`.
fn deflate_zlib(input: &[u8], level: i32, out: &mut Vec<u8>) {
    use miniz_oxide::deflate::core::{
        compress_to_output, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush,
        TDEFLStatus,
    };
    // zlib's -1 is its level 6; the URI option allows nothing above 9.
    let level = if level < 0 { 6 } else { level.min(9) };
    // A positive window_bits asks for the zlib wrapper.
    let flags = create_comp_flags_from_zip_params(level, 15, 0);
    let mut compressor = CompressorOxide::new(flags);
    let (status, _) = compress_to_output(&mut compressor, input, TDEFLFlush::Finish, |chunk| {
        out.extend_from_slice(chunk);
        true
    });
    // Writing into a Vec cannot fail, and Finish consumes all the input.
    debug_assert_eq!(status, TDEFLStatus::Done);
}

/// Whether `frame` is an OP_COMPRESSED message.
pub fn is_compressed(frame: &[u8]) -> bool {
    read_i32(frame, 12).ok() == Some(OP_COMPRESSED)
}

/// Unwraps the OP_COMPRESSED message `frame` into `out` (cleared): the
/// message it carries, with the header rebuilt (same ids, the original
/// opCode, the uncompressed length). The decompressed message must fit
/// `max_message_size` and be exactly `uncompressedSize` bytes; anything
/// else (an unknown compressor id, a corrupt stream, a lying size, a
/// compressed message inside) is a protocol error.
pub fn decompress(frame: &[u8], max_message_size: usize, out: &mut Vec<u8>) -> Result<()> {
    let header = Header::parse(frame)?;
    if header.op_code != OP_COMPRESSED {
        return Err(Error::protocol("not an OP_COMPRESSED message"));
    }
    if frame.len() < HEADER_LEN + PREFIX_LEN {
        return Err(Error::protocol("OP_COMPRESSED message truncated"));
    }
    let original_op_code = read_i32(frame, HEADER_LEN)?;
    let claimed = read_i32(frame, HEADER_LEN + 4)?;
    let id = frame[HEADER_LEN + 8];
    let input = &frame[HEADER_LEN + PREFIX_LEN..];
    if original_op_code == OP_COMPRESSED {
        return Err(Error::protocol("OP_COMPRESSED message wraps another"));
    }
    let max = max_message_size.min(MAX_MESSAGE_SIZE);
    let size = usize::try_from(claimed)
        .ok()
        .filter(|size| HEADER_LEN + size <= max)
        .ok_or_else(|| {
            Error::protocol(format!(
                "OP_COMPRESSED uncompressedSize {claimed} exceeds maxMessageSizeBytes {max}"
            ))
        })?;
    let lie = |what: &str| {
        Error::protocol(format!(
            "OP_COMPRESSED {what} message does not decompress to its uncompressedSize {size}"
        ))
    };
    let corrupt = |what: &str, e: &dyn std::fmt::Display| {
        Error::protocol(format!(
            "corrupt {what} data in an OP_COMPRESSED message: {e}"
        ))
    };
    // Claims these compressors could not have produced from `input`.
    let impossible = match id {
        0 => input.len() != size,
        1 => snap::raw::decompress_len(input).map_err(|e| corrupt("snappy", &e))? != size,
        2 => {
            size > input
                .len()
                .saturating_mul(DEFLATE_MAX_RATIO)
                .saturating_add(64)
        }
        3 => false,
        other => {
            return Err(Error::protocol(format!(
                "OP_COMPRESSED message with unknown compressorId {other}"
            )))
        }
    };
    let name = ["noop", "snappy", "zlib", "zstd"][id as usize];
    if impossible {
        return Err(lie(name));
    }
    out.clear();
    out.try_reserve_exact(HEADER_LEN + size).map_err(|e| {
        Error::protocol(format!("no memory for a reply of {size} bytes")).with_cause(e)
    })?;
    Header {
        length: (HEADER_LEN + size) as i32,
        op_code: original_op_code,
        ..header
    }
    .write(out);
    if id == 0 {
        out.extend_from_slice(input);
        return Ok(());
    }
    out.resize(HEADER_LEN + size, 0);
    let target = &mut out[HEADER_LEN..];
    match id {
        1 => {
            let n = snap::raw::Decoder::new()
                .decompress(input, target)
                .map_err(|e| corrupt(name, &e))?;
            if n != size {
                return Err(lie(name));
            }
        }
        2 => {
            use miniz_oxide::inflate::{decompress_slice_iter_to_slice, TINFLStatus};
            match decompress_slice_iter_to_slice(target, std::iter::once(input), true, false) {
                Ok(n) if n == size => {}
                Ok(_) | Err(TINFLStatus::HasMoreOutput) => return Err(lie(name)),
                Err(e) => return Err(corrupt(name, &format!("{e:?}"))),
            }
        }
        _ => inflate_zstd(input, target).map_err(|e| match e {
            ZstdFailure::Size => lie(name),
            ZstdFailure::Corrupt(e) => corrupt(name, &e),
        })?,
    }
    Ok(())
}

enum ZstdFailure {
    Size,
    Corrupt(String),
}

/// One zstd frame from `input`, exactly filling `target`. The decoder
/// reserves the window its frame header asks for before decoding anything,
/// so that is bounded by the announced size: the next power of two (a
/// compressor's window is a power of two at least as large as what it
/// compressed), at least 8 MiB. Decoding produces at most one block
/// (128 KiB) past what is read.
fn inflate_zstd(mut input: &[u8], target: &mut [u8]) -> std::result::Result<(), ZstdFailure> {
    use std::io::Read;
    let window = target.len().next_power_of_two().max(8 << 20) as u64;
    let mut decoder =
        ruzstd::decoding::StreamingDecoder::new_with_max_window_size(&mut input, window)
            .map_err(|e| ZstdFailure::Corrupt(e.to_string()))?;
    let mut filled = 0;
    while filled < target.len() {
        match decoder.read(&mut target[filled..]) {
            Ok(0) => return Err(ZstdFailure::Size),
            Ok(n) => filled += n,
            Err(e) => return Err(ZstdFailure::Corrupt(e.to_string())),
        }
    }
    match decoder.read(&mut [0u8; 1]) {
        Ok(0) => Ok(()),
        Ok(_) => Err(ZstdFailure::Size),
        Err(e) => Err(ZstdFailure::Corrupt(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{check_reply, encode_op_msg, OP_MSG};
    use crate::ErrorKind;
    use bson::rawdoc;

    /// An OP_MSG reply to request 7 with a body that compresses well.
    fn reply() -> Vec<u8> {
        let docs: Vec<_> = (0..200)
            .map(|i| rawdoc! { "_id": i, "name": "a name that repeats", "n": 1.5 })
            .collect();
        let mut array = bson::RawArrayBuf::new();
        for d in docs {
            array.push(d);
        }
        let body = rawdoc! { "cursor": { "firstBatch": array, "id": 0_i64 }, "ok": 1.0 };
        let mut frame = Vec::new();
        encode_op_msg(&mut frame, 99, 0, &body, &[], MAX_MESSAGE_SIZE).unwrap();
        frame[8..12].copy_from_slice(&7i32.to_le_bytes());
        frame
    }

    fn wrap(frame: &[u8], c: Compressor, level: Option<i32>) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(compress(frame, c, level, MAX_MESSAGE_SIZE, &mut out).unwrap());
        out
    }

    fn protocol_error(r: Result<()>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{e:?}");
        e.to_string()
    }

    #[test]
    fn every_compressor_round_trips_and_shrinks_a_repetitive_reply() {
        let frame = reply();
        for c in Compressor::ALL {
            let wrapped = wrap(&frame, c, None);
            assert!(is_compressed(&wrapped));
            assert!(
                wrapped.len() < frame.len() / 3,
                "{c:?}: {} of {}",
                wrapped.len(),
                frame.len()
            );
            let header = Header::parse(&wrapped).unwrap();
            assert_eq!(header.length as usize, wrapped.len());
            assert_eq!((header.request_id, header.response_to), (99, 7));
            assert_eq!(read_i32(&wrapped, 16).unwrap(), OP_MSG);
            assert_eq!(read_i32(&wrapped, 20).unwrap() as usize, frame.len() - 16);
            assert_eq!(wrapped[24], c.id());
            let mut out = Vec::new();
            decompress(&wrapped, MAX_MESSAGE_SIZE, &mut out).unwrap();
            assert_eq!(out, frame, "{c:?}");
            assert!(check_reply(&out, 7, OP_MSG).is_ok());
        }
    }

    #[test]
    fn zlib_levels_are_honoured() {
        let frame = reply();
        let stored = wrap(&frame, Compressor::Zlib, Some(0));
        let fast = wrap(&frame, Compressor::Zlib, Some(1));
        let best = wrap(&frame, Compressor::Zlib, Some(9));
        let default = wrap(&frame, Compressor::Zlib, Some(-1));
        // Level 0 stores: no smaller than the message.
        assert!(
            stored.len() > frame.len(),
            "{} {}",
            stored.len(),
            frame.len()
        );
        assert!(best.len() <= fast.len() && fast.len() < frame.len());
        assert_eq!(default, wrap(&frame, Compressor::Zlib, Some(6)));
        for w in [stored, fast, best] {
            let mut out = Vec::new();
            decompress(&w, MAX_MESSAGE_SIZE, &mut out).unwrap();
            assert_eq!(out, frame);
        }
    }

    #[test]
    fn the_noop_compressor_is_read() {
        let frame = reply();
        let mut wrapped = wrap(&frame, Compressor::Snappy, None);
        wrapped.truncate(HEADER_LEN + PREFIX_LEN);
        wrapped[24] = 0;
        wrapped.extend_from_slice(&frame[HEADER_LEN..]);
        let len = wrapped.len() as i32;
        wrapped[0..4].copy_from_slice(&len.to_le_bytes());
        let mut out = Vec::new();
        decompress(&wrapped, MAX_MESSAGE_SIZE, &mut out).unwrap();
        assert_eq!(out, frame);
    }

    #[test]
    fn an_unknown_compressor_id_is_refused() {
        let mut wrapped = wrap(&reply(), Compressor::Zlib, None);
        for id in [4u8, 255] {
            wrapped[24] = id;
            let msg = protocol_error(decompress(&wrapped, MAX_MESSAGE_SIZE, &mut Vec::new()));
            assert!(msg.contains(&format!("unknown compressorId {id}")), "{msg}");
        }
    }

    /// `wrapped` with its uncompressedSize replaced.
    fn claiming(wrapped: &[u8], size: i32) -> Vec<u8> {
        let mut w = wrapped.to_vec();
        w[20..24].copy_from_slice(&size.to_le_bytes());
        w
    }

    #[test]
    fn a_lying_uncompressed_size_is_refused_whichever_way_it_lies() {
        let frame = reply();
        let actual = (frame.len() - HEADER_LEN) as i32;
        for c in Compressor::ALL {
            let wrapped = wrap(&frame, c, None);
            for size in [actual - 1, actual + 1, 1, 0] {
                let msg = protocol_error(decompress(
                    &claiming(&wrapped, size),
                    MAX_MESSAGE_SIZE,
                    &mut Vec::new(),
                ));
                assert!(msg.contains("uncompressedSize"), "{c:?} {size}: {msg}");
            }
            for size in [-1, i32::MAX, MAX_MESSAGE_SIZE as i32] {
                let msg = protocol_error(decompress(
                    &claiming(&wrapped, size),
                    MAX_MESSAGE_SIZE,
                    &mut Vec::new(),
                ));
                assert!(
                    msg.contains("exceeds maxMessageSizeBytes"),
                    "{c:?} {size}: {msg}"
                );
            }
            // The negotiated maximum is the bound, not just the protocol's.
            let msg = protocol_error(decompress(&wrapped, 1000, &mut Vec::new()));
            assert!(msg.contains("maxMessageSizeBytes 1000"), "{msg}");
        }
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_message_maximum() {
        // 8 MB of zeros squeezed into a few hundred kilobytes at most,
        // announced honestly, against a connection whose maximum is 1 MB;
        // then announced as just under 1 MB.
        let mut frame = vec![0u8; 8_000_000];
        let len = frame.len() as i32;
        frame[0..4].copy_from_slice(&len.to_le_bytes());
        frame[12..16].copy_from_slice(&OP_MSG.to_le_bytes());
        for c in Compressor::ALL {
            let wrapped = wrap(&frame, c, Some(9));
            assert!(wrapped.len() < 500_000, "{c:?}: {}", wrapped.len());
            let msg = protocol_error(decompress(&wrapped, 1_000_000, &mut Vec::new()));
            assert!(msg.contains("exceeds maxMessageSizeBytes"), "{c:?}: {msg}");
            let mut out = Vec::new();
            let msg = protocol_error(decompress(
                &claiming(&wrapped, 999_000),
                1_000_000,
                &mut out,
            ));
            assert!(msg.contains("uncompressedSize 999000"), "{c:?}: {msg}");
            assert!(
                out.capacity() <= 1_000_000,
                "{c:?}: grew to {}",
                out.capacity()
            );
        }
    }

    #[test]
    fn a_few_bytes_claiming_megabytes_are_refused_before_allocating() {
        let frame = reply();
        for c in [Compressor::Zlib, Compressor::Snappy] {
            let wrapped = claiming(&wrap(&frame, c, None), 40_000_000);
            let mut out = Vec::new();
            protocol_error(decompress(&wrapped, MAX_MESSAGE_SIZE, &mut out));
            assert_eq!(out.capacity(), 0, "{c:?}");
        }
    }

    #[test]
    fn a_zstd_window_far_beyond_the_message_is_refused_before_it_is_reserved() {
        // A zstd frame of one raw byte whose header asks for a 1 GiB window.
        let mut frame = Vec::new();
        Header {
            length: 0,
            request_id: 1,
            response_to: 7,
            op_code: OP_COMPRESSED,
        }
        .write(&mut frame);
        frame.extend_from_slice(&OP_MSG.to_le_bytes());
        frame.extend_from_slice(&1i32.to_le_bytes());
        frame.push(Compressor::Zstd.id());
        frame.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
        // No content size, not single-segment; window log 10 + 20.
        frame.extend_from_slice(&[0x00, 20 << 3]);
        // The last block, raw, one byte.
        frame.extend_from_slice(&[9, 0, 0, b'x']);
        let len = frame.len() as i32;
        frame[0..4].copy_from_slice(&len.to_le_bytes());
        let msg = protocol_error(decompress(&frame, MAX_MESSAGE_SIZE, &mut Vec::new()));
        assert!(msg.contains("corrupt zstd"), "{msg}");
        // The same frame with a window of 1 KiB reads.
        let at = frame.len() - 5;
        frame[at] = 0;
        let mut out = Vec::new();
        decompress(&frame, MAX_MESSAGE_SIZE, &mut out).unwrap();
        assert_eq!(&out[HEADER_LEN..], b"x");
    }

    #[test]
    fn garbage_after_the_prefix_is_a_protocol_error_for_every_id() {
        let frame = reply();
        // A simple deterministic byte stream.
        let mut x = 0x2545_f491_u32;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        };
        for c in Compressor::ALL {
            let wrapped = wrap(&frame, c, None);
            for round in 0..200 {
                let mut bad = wrapped.clone();
                if round % 2 == 0 {
                    // Flip bytes in the compressed stream.
                    for _ in 0..4 {
                        let at = HEADER_LEN + PREFIX_LEN + noise() as usize % (bad.len() - 25);
                        bad[at] ^= noise() | 1;
                    }
                } else {
                    // Cut it short.
                    bad.truncate(HEADER_LEN + PREFIX_LEN + noise() as usize % (bad.len() - 25));
                }
                let mut out = Vec::new();
                if decompress(&bad, MAX_MESSAGE_SIZE, &mut out).is_ok() {
                    // A flip in a literal can survive (snappy has no
                    // checksum): the size still matched.
                    assert_eq!(out.len(), frame.len());
                }
            }
        }
        let msg = protocol_error(decompress(
            &wrap(&frame, Compressor::Zlib, None)[..20],
            1 << 20,
            &mut Vec::new(),
        ));
        assert!(msg.contains("truncated"), "{msg}");
    }

    #[test]
    fn a_compressed_message_inside_another_is_refused() {
        let inner = wrap(&reply(), Compressor::Snappy, None);
        let mut outer = wrap(&inner, Compressor::Snappy, None);
        outer[16..20].copy_from_slice(&OP_COMPRESSED.to_le_bytes());
        let msg = protocol_error(decompress(&outer, MAX_MESSAGE_SIZE, &mut Vec::new()));
        assert!(msg.contains("wraps another"), "{msg}");
    }

    #[test]
    fn the_spec_list_is_never_compressed() {
        for name in [
            "hello",
            "isMaster",
            "ismaster",
            "saslStart",
            "saslContinue",
            "getnonce",
            "authenticate",
            "createUser",
            "updateUser",
            "copydbSaslStart",
            "copydbgetnonce",
            "copydb",
        ] {
            assert!(!may_compress(name), "{name}");
        }
        for name in [
            "find",
            "insert",
            "ping",
            "getMore",
            "aggregate",
            "dropUser",
            "endSessions",
        ] {
            assert!(may_compress(name), "{name}");
        }
    }

    #[test]
    fn negotiation_takes_the_clients_first_that_the_server_named() {
        let client = Compression {
            compressors: vec![Compressor::Zstd, Compressor::Snappy, Compressor::Zlib],
            zlib_level: None,
        };
        let hello = |names: &[&str]| {
            let mut a = bson::RawArrayBuf::new();
            for n in names {
                a.push(*n);
            }
            rawdoc! { "ok": 1, "compression": a }
        };
        assert_eq!(
            client.negotiate(&hello(&["zlib", "snappy"])),
            Some(Compressor::Snappy)
        );
        assert_eq!(client.negotiate(&hello(&["zlib"])), Some(Compressor::Zlib));
        assert_eq!(client.negotiate(&hello(&["lz4"])), None);
        assert_eq!(client.negotiate(&rawdoc! { "ok": 1 }), None);
        assert_eq!(Compression::default().negotiate(&hello(&["zlib"])), None);
    }

    #[test]
    fn an_oversized_result_is_left_for_the_caller_to_send_plain() {
        let frame = reply();
        let mut out = Vec::new();
        let stored = compress(&frame, Compressor::Zlib, Some(0), frame.len(), &mut out).unwrap();
        assert!(!stored && out.is_empty());
    }
}
