//! Name validation shared by the bus types, and small serde helpers that enforce the
//! constraints of the JSON Schemas while deserializing (so bad input is refused at the edge).

use serde::de::{Deserialize, Deserializer, Error as _};

/// Longest tenant or rule name.
pub const MAX_NAME_LEN: usize = 63;

/// `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`: the name of a tenant, rule or device.
pub fn is_valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// The error text used when a name does not match the pattern.
pub fn name_error(s: &str) -> String {
    format!(
        "invalid name {s:?}: expected 1-63 characters of a-z, 0-9 and '-', \
         starting and ending with a letter or digit"
    )
}

/// Deserialize a `String` that must satisfy [`is_valid_name`].
pub fn de_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if is_valid_name(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(name_error(&s)))
    }
}

/// Deserialize a `String` whose length in characters lies in `min..=max`.
pub fn check_len<E: serde::de::Error>(
    field: &str,
    s: String,
    min: usize,
    max: usize,
) -> Result<String, E> {
    let n = s.chars().count();
    if n < min || n > max {
        Err(E::custom(format!(
            "{field}: length {n} is outside {min}..={max} characters"
        )))
    } else {
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "a",
            "web",
            "analytics-reads-to-cache",
            "0",
            "a1-b2",
            &"a".repeat(63),
        ] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            &"a".repeat(64),
            "é",
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
