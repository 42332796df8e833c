//! Why the switch refused a change of its rules and stages.

use lachesis_stages::stage::StageError;

/// A refused change; `Display` is the message an ack or the CLI carries. Nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// A stage could not be built or grown (a full device is one: [`Self::is_device_full`]).
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The stages or rules do not check, a route does not compile, a directory is outside
    /// the roots.
    #[error("{0}")]
    Refused(String),
}

impl SwitchError {
    /// Whether the change was refused for want of device space (and might fit with the
    /// stages it replaces emptied first).
    pub fn is_device_full(&self) -> bool {
        matches!(self, SwitchError::Stage(e) if e.is_device_full())
    }
}

impl From<String> for SwitchError {
    fn from(message: String) -> SwitchError {
        SwitchError::Refused(message)
    }
}

/// Layers that report refusals as text (an ack's message, a CLI's exit 2) take the message.
impl From<SwitchError> for String {
    fn from(e: SwitchError) -> String {
        e.to_string()
    }
}
