//! Typed errors of the reader. Every variant names the file and the byte offset of the damage.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The cause is part of the message, not a source in the error's chain: a chain printed
    /// whole (`{:#}`, every process's message in an MPI job) would say it twice.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: byte {offset}: bad {what} magic {found:02x?}", path.display())]
    BadMagic {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        found: Vec<u8>,
    },
    #[error("{}: byte {offset}: {what} version {version} is not supported (this reader reads versions up to {supported})", path.display())]
    UnsupportedVersion {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        version: u16,
        supported: u16,
    },
    #[error("{}: byte {offset}: {what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})", path.display())]
    ChecksumMismatch {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{}: byte {offset}: truncated {what}: needs {needed} bytes, {available} present", path.display())]
    Truncated {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        needed: u64,
        available: u64,
    },
    #[error("{}: byte {offset}: bad {what} {value}: {reason}", path.display())]
    BadLength {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        value: u64,
        reason: &'static str,
    },
    #[error("{}: byte {offset}: unknown {what} {value}", path.display())]
    UnknownCodec {
        path: PathBuf,
        offset: u64,
        what: &'static str,
        value: u8,
    },
    #[error("{}: byte {offset}: bad header field: {reason}", path.display())]
    BadHeader {
        path: PathBuf,
        offset: u64,
        reason: &'static str,
    },
    #[error("{}: byte {offset}: undecodable chunk payload: {reason}", path.display())]
    BadPayload {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

impl FormatError {
    /// Byte offset in the file where the damage starts (the start of the damaged header or chunk).
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::Io { .. } => None,
            FormatError::BadMagic { offset, .. }
            | FormatError::UnsupportedVersion { offset, .. }
            | FormatError::ChecksumMismatch { offset, .. }
            | FormatError::Truncated { offset, .. }
            | FormatError::BadLength { offset, .. }
            | FormatError::UnknownCodec { offset, .. }
            | FormatError::BadHeader { offset, .. }
            | FormatError::BadPayload { offset, .. } => Some(*offset),
        }
    }

    pub fn path(&self) -> &std::path::Path {
        match self {
            FormatError::Io { path, .. }
            | FormatError::BadMagic { path, .. }
            | FormatError::UnsupportedVersion { path, .. }
            | FormatError::ChecksumMismatch { path, .. }
            | FormatError::Truncated { path, .. }
            | FormatError::BadLength { path, .. }
            | FormatError::UnknownCodec { path, .. }
            | FormatError::BadHeader { path, .. }
            | FormatError::BadPayload { path, .. } => path,
        }
    }

    /// What is wrong, without the file and offset the full message starts with: for reports
    /// that name the place themselves.
    pub fn reason(&self) -> String {
        let full = self.to_string();
        let mut prefix = format!("{}: ", self.path().display());
        if let Some(offset) = self.offset() {
            prefix.push_str(&format!("byte {offset}: "));
        }
        full.strip_prefix(&prefix)
            .map(str::to_owned)
            .unwrap_or(full)
    }
}
