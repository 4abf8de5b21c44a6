//! Bearer-token authentication: a tokens file, roles, constant-time comparison.
//!
//! Tokens file format, one token per line, `#` starts a comment:
//!
//! ```text
//! # role[,role]  token
//! write          3f9c2a...   # collectors: Write, ClockSync, OTLP Export
//! read           77ab10...   # dashboards: Stats
//! read,write     c0ffee...
//! ```
//!
//! Tokens must be at least [`MIN_TOKEN_LEN`] characters of visible ASCII. Clients send
//! `authorization: Bearer <token>` metadata on every call.

use std::fmt;

use subtle::ConstantTimeEq;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// Shortest accepted token (characters).
pub const MIN_TOKEN_LEN: usize = 16;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `Stats` (self-telemetry).
    Read,
    /// `Write`, `ClockSync` and OTLP `MetricsService/Export`.
    Write,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Read => "read",
            Role::Write => "write",
        })
    }
}

/// A malformed tokens file.
#[derive(Debug, thiserror::Error)]
#[error("tokens file line {line}: {reason}")]
pub struct TokenFileError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

#[derive(Debug, Clone, Copy, Default)]
struct Roles {
    read: bool,
    write: bool,
}

impl Roles {
    fn has(self, role: Role) -> bool {
        match role {
            Role::Read => self.read,
            Role::Write => self.write,
        }
    }

    fn names(self) -> String {
        match (self.read, self.write) {
            (true, true) => "read,write".into(),
            (true, false) => "read".into(),
            (false, true) => "write".into(),
            (false, false) => "none".into(),
        }
    }
}

/// The accepted tokens and their roles.
#[derive(Clone)]
pub struct TokenSet {
    entries: Vec<(Vec<u8>, Roles)>,
}

impl fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenSet({} tokens)", self.entries.len())
    }
}

impl TokenSet {
    /// Parses a tokens file (format in the module docs). A token listed twice gets the union
    /// of its roles.
    pub fn parse(text: &str) -> Result<Self, TokenFileError> {
        let mut entries: Vec<(Vec<u8>, Roles)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut parts = content.split_whitespace();
            let (Some(roles_field), Some(token), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(TokenFileError { line, reason: "expected `role[,role] token`".into() });
            };
            let mut roles = Roles::default();
            for name in roles_field.split(',') {
                match name {
                    "read" => roles.read = true,
                    "write" => roles.write = true,
                    other => {
                        return Err(TokenFileError {
                            line,
                            reason: format!("unknown role {other:?} (roles: read, write)"),
                        });
                    }
                }
            }
            if token.len() < MIN_TOKEN_LEN {
                return Err(TokenFileError {
                    line,
                    reason: format!("token is {} characters; at least {MIN_TOKEN_LEN} are required", token.len()),
                });
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(TokenFileError { line, reason: "token must be visible ASCII".into() });
            }
            match entries.iter_mut().find(|(t, _)| t.as_slice() == token.as_bytes()) {
                Some((_, r)) => {
                    r.read |= roles.read;
                    r.write |= roles.write;
                }
                None => entries.push((token.as_bytes().to_vec(), roles)),
            }
        }
        if entries.is_empty() {
            return Err(TokenFileError { line: 0, reason: "the file defines no tokens".into() });
        }
        Ok(TokenSet { entries })
    }

    /// Number of distinct tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no token is defined (never true for a parsed file).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Looks a presented token up, comparing it with every stored token in constant time
    /// per comparison and without stopping at the first match.
    fn lookup(&self, presented: &[u8]) -> Option<Roles> {
        let mut found = None;
        for (token, roles) in &self.entries {
            if bool::from(token.as_slice().ct_eq(presented)) {
                found = Some(*roles);
            }
        }
        found
    }

    /// Checks the `authorization` metadata of a call that needs `role` on service `service`.
    pub fn authorize(&self, metadata: &MetadataMap, role: Role, service: &str) -> Result<(), Status> {
        let Some(value) = metadata.get("authorization") else {
            return Err(Status::unauthenticated(format!(
                "missing authorization metadata: {service} needs `authorization: Bearer <token>` with role {role}"
            )));
        };
        let value = value.as_bytes();
        let token = match value.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
            _ => {
                return Err(Status::unauthenticated("malformed authorization metadata: expected `Bearer <token>`"));
            }
        };
        match self.lookup(token) {
            None => Err(Status::unauthenticated("invalid bearer token")),
            Some(roles) if roles.has(role) => Ok(()),
            Some(roles) => {
                Err(Status::permission_denied(format!("token has role {}; {service} needs role {role}", roles.names())))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tonic::Code;

    const W: &str = "wwwwwwwwwwwwwwwwwwww";
    const R: &str = "rrrrrrrrrrrrrrrrrrrr";

    fn meta(v: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", v.parse().unwrap());
        m
    }

    #[test]
    fn roles_and_codes() {
        let set = TokenSet::parse(&format!("# tokens\nwrite {W}\nread {R} # dashboards\n\n")).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.authorize(&meta(&format!("Bearer {W}")), Role::Write, "Write").is_ok());
        assert!(set.authorize(&meta(&format!("bearer {R}")), Role::Read, "Stats").is_ok());
        let e = set.authorize(&meta(&format!("Bearer {R}")), Role::Write, "Write").unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        assert!(e.message().contains("needs role write"), "{}", e.message());
        let e = set.authorize(&meta("Bearer nope-nope-nope-nope"), Role::Write, "Write").unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        let e = set.authorize(&MetadataMap::new(), Role::Write, "Write").unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(e.message().contains("missing authorization"));
        let e = set.authorize(&meta(W), Role::Write, "Write").unwrap_err();
        assert!(e.message().contains("malformed"));
        // A prefix of a valid token is not valid.
        let e = set.authorize(&meta(&format!("Bearer {}", &W[..18])), Role::Write, "Write").unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
    }

    #[test]
    fn bad_files() {
        assert!(TokenSet::parse("").is_err());
        assert!(TokenSet::parse("admin aaaaaaaaaaaaaaaaaaaaaa").unwrap_err().reason.contains("unknown role"));
        assert_eq!(TokenSet::parse("\nwrite short").unwrap_err().line, 2);
        assert!(TokenSet::parse("write a b").is_err());
        let set = TokenSet::parse(&format!("read {W}\nwrite {W}")).unwrap();
        assert_eq!(set.len(), 1);
        assert!(set.authorize(&meta(&format!("Bearer {W}")), Role::Write, "Write").is_ok());
    }
}
