//! `$clusterTime` gossip: the client and each session keep the greatest
//! cluster time seen, and send it with every command.

use bson::{RawDocument, RawDocumentBuf};

fn time_of(doc: &RawDocument) -> Option<bson::Timestamp> {
    doc.get_timestamp("clusterTime").ok()
}

/// Replaces `current` with `candidate` when the candidate is later.
pub fn advance(current: &mut Option<RawDocumentBuf>, candidate: RawDocumentBuf) {
    let newer = match (current.as_deref().and_then(time_of), time_of(&candidate)) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(cur), Some(new)) => new > cur,
    };
    if newer {
        *current = Some(candidate);
    }
}

/// The later of two optional cluster times.
pub fn latest(a: Option<RawDocumentBuf>, b: Option<RawDocumentBuf>) -> Option<RawDocumentBuf> {
    let mut out = a;
    if let Some(b) = b {
        advance(&mut out, b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{rawdoc, Timestamp};

    fn ct(time: u32) -> RawDocumentBuf {
        rawdoc! { "clusterTime": Timestamp { time, increment: 1 }, "signature": { "keyId": 0i64 } }
    }

    #[test]
    fn keeps_the_greatest() {
        let mut cur = None;
        advance(&mut cur, ct(5));
        advance(&mut cur, ct(3));
        assert_eq!(cur, Some(ct(5)));
        advance(&mut cur, ct(9));
        assert_eq!(cur, Some(ct(9)));
        advance(&mut cur, rawdoc! { "junk": 1 });
        assert_eq!(cur, Some(ct(9)), "a malformed one is ignored");
        assert_eq!(latest(Some(ct(2)), Some(ct(7))), Some(ct(7)));
        assert_eq!(latest(None, None), None);
    }
}
