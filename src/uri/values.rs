//! Parsers for the option value types of the connection string spec ("Values").
//! Each returns why a value was refused, so the caller can warn or fail as the spec says.

/// Why an option value was not used.
pub(crate) enum Reject {
    /// Invalid value: the option is ignored with a warning (connection string spec).
    Invalid(String),
    /// A value the specs make fatal (e.g. an unknown auth mechanism).
    Fatal(String),
    /// The key is not a known option: ignored with a warning.
    Unknown,
}

pub(crate) type ValueResult<T> = Result<T, Reject>;

pub(crate) fn invalid<T>(why: impl Into<String>) -> ValueResult<T> {
    Err(Reject::Invalid(why.into()))
}

pub(crate) fn fatal<T>(why: impl Into<String>) -> ValueResult<T> {
    Err(Reject::Fatal(why.into()))
}

/// Integer options are 32-bit unless the spec says otherwise.
pub(crate) const I32_MAX: i64 = i32::MAX as i64;

/// `true` or `false` (any ASCII case). The legacy aliases (`1`, `yes`, ...) are deprecated
/// and deliberately not accepted; an empty value is ignored like any invalid one.
pub(crate) fn boolean(v: &str) -> ValueResult<bool> {
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else if v.is_empty() {
        invalid("the value is empty")
    } else {
        invalid("expected \"true\" or \"false\"")
    }
}

/// A decimal integer in `min..=max`.
pub(crate) fn integer(v: &str, min: i64, max: i64) -> ValueResult<i64> {
    if v.is_empty() {
        return invalid("the value is empty");
    }
    let Ok(n) = v.parse::<i64>() else {
        return invalid("expected an integer");
    };
    if n < min || n > max {
        return if max == I32_MAX || max == i64::MAX {
            invalid(format!("must be at least {min}"))
        } else {
            invalid(format!("must be between {min} and {max}"))
        };
    }
    Ok(n)
}

/// A 32-bit duration in milliseconds, at least `min`.
pub(crate) fn millis(v: &str, min: i64) -> ValueResult<u64> {
    let n = integer(v, min.max(0), I32_MAX)?;
    u64::try_from(n).or_else(|_| invalid("must not be negative"))
}

/// A 32-bit count, at least `min`.
pub(crate) fn count(v: &str, min: i64) -> ValueResult<u32> {
    let n = integer(v, min.max(0), I32_MAX)?;
    u32::try_from(n).or_else(|_| invalid("must not be negative"))
}

/// A 32-bit signed integer in `min..=max`.
pub(crate) fn int32(v: &str, min: i64, max: i64) -> ValueResult<i32> {
    let n = integer(v, min, max.min(I32_MAX))?;
    i32::try_from(n).or_else(|_| invalid("out of range"))
}

/// A non-empty string (an empty one is ignored with a warning: it cannot mean anything).
pub(crate) fn string(v: &str) -> ValueResult<String> {
    if v.is_empty() {
        invalid("the value is empty")
    } else {
        Ok(v.to_owned())
    }
}

/// Splits `k1:v1,k2:v2`. The key ends at the first `:`, so values may contain colons
/// (`TOKEN_RESOURCE:mongodb://foo`); an item without a `:` or with an empty key is `Err`.
pub(crate) fn pairs(v: &str) -> impl Iterator<Item = Result<(&str, &str), ()>> {
    v.split(',').map(|item| match item.split_once(':') {
        Some((key, value)) if !key.is_empty() => Ok((key, value)),
        _ => Err(()),
    })
}
