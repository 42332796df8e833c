//! Why a stage could not be built or resized.
//!
//! A full device is the one refusal a caller acts on (the FUSE switch makes a change again
//! with the stages it replaces emptied first), so it is a variant a caller asks for with
//! [`StageError::is_device_full`], through whatever context was put around it; every other
//! refusal is reported to the operator as it reads.

/// A refusal to build or resize a stage; `Display` is the message an ack carries.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A device has fewer free regions than a stage needs.
    #[error(
        "device {device:?} is full: {needed} more regions of {region_bytes} bytes needed, \
         {free} of {regions} free"
    )]
    DeviceFull {
        device: String,
        needed: u32,
        region_bytes: u64,
        free: u32,
        regions: u32,
    },
    /// The engine refused its configuration or its device failed.
    #[error(transparent)]
    Engine(#[from] lachesis_cache::Error),
    /// Anything else: a bad config, no such device, a log directory that cannot be opened.
    #[error("{0}")]
    Refused(String),
    /// `source`, said of `context` (a stage, a device, a step of a change).
    #[error("{context}: {source}")]
    In {
        context: String,
        source: Box<StageError>,
    },
}

impl StageError {
    /// Whether the refusal is, underneath its context, for want of device space.
    pub fn is_device_full(&self) -> bool {
        match self {
            StageError::DeviceFull { .. } => true,
            StageError::In { source, .. } => source.is_device_full(),
            _ => false,
        }
    }

    /// This refusal, said of `context`.
    pub fn context(self, context: impl Into<String>) -> StageError {
        StageError::In {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

impl From<String> for StageError {
    fn from(message: String) -> StageError {
        StageError::Refused(message)
    }
}

impl From<&str> for StageError {
    fn from(message: &str) -> StageError {
        StageError::Refused(message.to_string())
    }
}

/// Layers that report refusals as text (an ack's message, a CLI's exit 2) take the message.
impl From<StageError> for String {
    fn from(e: StageError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> StageError {
        StageError::DeviceFull {
            device: "flash0".into(),
            needed: 3,
            region_bytes: 1 << 20,
            free: 1,
            regions: 16,
        }
    }

    #[test]
    fn a_full_device_is_found_under_any_context_and_nothing_else_is() {
        let e = full().context("cache stage \"a\"").context("stage \"a\"");
        assert!(e.is_device_full());
        assert_eq!(
            e.to_string(),
            "stage \"a\": cache stage \"a\": device \"flash0\" is full: 3 more regions of \
             1048576 bytes needed, 1 of 16 free"
        );
        let other = StageError::from("no device \"x\"").context("cache stage \"a\"");
        assert!(!other.is_device_full());
        assert_eq!(other.to_string(), "cache stage \"a\": no device \"x\"");
    }
}
