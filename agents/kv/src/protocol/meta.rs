//! The meta commands `mg`, `ms`, `md` and `mn`: a key, then flags of one letter each, some
//! with a token (`T30`, `Oopaque`). The flags are kept as sent; what each means is the
//! executor's business, so a reply can echo them in the order given.

use super::{error, num, reply, valid_key, value, Limits, Parse};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
    Noop,
}

impl MetaKind {
    pub fn name(self) -> &'static str {
        match self {
            MetaKind::Get => "mg",
            MetaKind::Set => "ms",
            MetaKind::Delete => "md",
            MetaKind::Noop => "mn",
        }
    }
}

/// One flag: its letter and its token (empty when it has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaFlag {
    pub flag: u8,
    pub token: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: MetaKind,
    /// Empty for `mn`.
    pub key: Vec<u8>,
    pub flags: Vec<MetaFlag>,
    /// `ms`: the value.
    pub data: Vec<u8>,
}

impl Meta {
    pub fn has(&self, flag: u8) -> bool {
        self.flags.iter().any(|f| f.flag == flag)
    }

    /// The token of `flag`, if the flag was given.
    pub fn token(&self, flag: u8) -> Option<&[u8]> {
        self.flags
            .iter()
            .find(|f| f.flag == flag)
            .map(|f| f.token.as_slice())
    }

    /// The token of `flag` as a number: `Ok(None)` when the flag is absent, `Err` when its
    /// token is not a number of that type.
    pub fn number<T: std::str::FromStr>(&self, flag: u8) -> Result<Option<T>, &'static str> {
        match self.token(flag) {
            None => Ok(None),
            Some(t) => num::<T>(t).map(Some).ok_or(reply::BAD_TOKEN),
        }
    }
}

fn flags(tokens: &[&[u8]]) -> Result<Vec<MetaFlag>, &'static str> {
    let mut out: Vec<MetaFlag> = Vec::with_capacity(tokens.len());
    for t in tokens {
        let flag = t[0];
        if !flag.is_ascii_alphabetic() {
            return Err(reply::INVALID_FLAG);
        }
        if out.iter().any(|f| f.flag == flag) {
            return Err(reply::DUPLICATE_FLAG);
        }
        out.push(MetaFlag {
            flag,
            token: t[1..].to_vec(),
        });
    }
    Ok(out)
}

pub(super) fn parse(
    name: &[u8],
    args: &[&[u8]],
    buf: &[u8],
    used: usize,
    limits: &Limits,
) -> Parse {
    let kind = match name {
        b"mg" => MetaKind::Get,
        b"ms" => MetaKind::Set,
        b"md" => MetaKind::Delete,
        _ => MetaKind::Noop,
    };
    if kind == MetaKind::Noop {
        return Parse::Command {
            cmd: super::Command::Meta(Meta {
                kind,
                key: Vec::new(),
                flags: Vec::new(),
                data: Vec::new(),
            }),
            used,
        };
    }
    let Some((&key, rest)) = args.split_first() else {
        return error(reply::BAD_FORMAT, used);
    };
    let (len, rest) = if kind == MetaKind::Set {
        let Some((l, rest)) = rest.split_first() else {
            return error(reply::BAD_FORMAT, used);
        };
        match num::<u32>(l) {
            Some(l) => (l as usize, rest),
            None => return error(reply::BAD_CHUNK, used),
        }
    } else {
        (0, rest)
    };
    let swallow = |reply| Parse::Swallow {
        reply,
        used,
        skip: len + 2,
        unlink: None,
    };
    let flags = match flags(rest) {
        Ok(f) => f,
        Err(e) if kind == MetaKind::Set => return swallow(e),
        Err(e) => return error(e, used),
    };
    if !valid_key(key) {
        return match kind {
            MetaKind::Set => swallow(reply::BAD_FORMAT),
            _ => error(reply::BAD_FORMAT, used),
        };
    }
    let meta = |data| Meta {
        kind,
        key: key.to_vec(),
        flags,
        data,
    };
    if kind != MetaKind::Set {
        return Parse::Command {
            cmd: super::Command::Meta(meta(Vec::new())),
            used,
        };
    }
    if len > limits.max_item {
        return Parse::Swallow {
            reply: reply::TOO_LARGE,
            used,
            skip: len + 2,
            unlink: Some(key.to_vec()),
        };
    }
    match value(buf, used, len) {
        Err(e) => e,
        Ok(None) => Parse::Incomplete {
            need: Some(used + len + 2),
        },
        Ok(Some((data, used))) => Parse::Command {
            cmd: super::Command::Meta(meta(data)),
            used,
        },
    }
}
