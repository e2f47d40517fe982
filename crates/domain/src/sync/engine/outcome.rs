//! How an entity's turn in a run ends, said once for both paths (an
//! entity's rows, `entity.rs`; the change stream, `capture.rs`): it ends
//! [`EntityOutcome::Done`], stops as drift, canceled or paused at a
//! checkpoint, or fails ([`Failure`]: which entity, whether a later attempt
//! may pass, whether this attempt was fenced off, with a code of its own
//! where it has one). A stop met deep inside a read unwinds like a failure
//! ([`Failure::halted`]) and is told apart where the turn ends.

use crate::shared::error::Code;

/// How one entity's sync (or the run's entities) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityOutcome {
    Done,
    /// The source's columns changed as the mapping's `schema_policy` does
    /// not take: the entity stays where it is until the flow is updated.
    Drift,
    /// The run was canceled: what was committed stays.
    Canceled,
    /// Paused at a checkpoint because the process is stopping: the run goes
    /// back to the queue and resumes from what was committed.
    Stopped,
}

/// Why an entity or a run failed, and whether trying again later may help
/// (an unreachable server, a timeout, a hiccup of the metadata store).
#[derive(Debug)]
pub struct Failure {
    /// The entity, or `None` for all of them (the run, or every CDC
    /// entity of a stream).
    pub entity: Option<String>,
    pub message: String,
    pub transient: bool,
    /// The run was taken over (this attempt is fenced off): stop without
    /// writing or recording anything more.
    pub lost: bool,
    /// Not a failure: a stop at a commit (drift, a cancel, a pause), carried
    /// out of a read the way a failure is.
    pub halt: Option<EntityOutcome>,
    /// The failure's code, where it has one of its own
    /// ([`Code::PositionLost`], say).
    pub code: Option<Code>,
}

impl Failure {
    /// A failure of every entity, said by `message`.
    pub fn all(message: impl Into<String>) -> Self {
        Failure { entity: None, message: message.into(), transient: false, lost: false, halt: None, code: None }
    }

    /// This attempt no longer holds the run.
    pub fn lost() -> Self {
        Failure { lost: true, ..Failure::all("the run was taken over by another attempt") }
    }

    /// A stop at a commit that is not a failure.
    pub fn halted(outcome: EntityOutcome) -> Self {
        Failure { halt: Some(outcome), ..Failure::all("halted") }
    }

    /// A failure with `code`.
    pub fn coded(code: Code, message: impl Into<String>) -> Self {
        Failure { code: Some(code), ..Failure::all(message) }
    }

    /// The stream no longer holds what an entity had not read.
    pub fn position_lost(message: impl Into<String>) -> Self {
        Failure::coded(Code::PositionLost, message)
    }

    /// The same failure, as `entity`'s.
    pub fn of(self, entity: &str) -> Self {
        Failure { entity: Some(entity.to_string()), ..self }
    }
}

impl From<crate::connect::connector::ConnectorError> for Failure {
    fn from(e: crate::connect::connector::ConnectorError) -> Self {
        let transient = e.transient();
        Failure { transient, ..Failure::all(e.to_string()) }
    }
}

impl From<crate::connect::service::OpenError> for Failure {
    fn from(e: crate::connect::service::OpenError) -> Self {
        use crate::connect::service::OpenError;
        match e {
            OpenError::Missing => Failure::from("a connection of the flow was deleted"),
            OpenError::Store(e) => Failure::from(e),
            OpenError::Resolve { connection, error } => {
                let mut f = Failure::from(error);
                f.message = format!("connection '{connection}': {}", f.message);
                f
            }
            OpenError::Open(e) => Failure::from(e),
        }
    }
}

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Self {
        Failure { transient: e.kind() == crate::ErrorKind::Internal, ..Failure::all(e.to_string()) }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::all(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::all(message)
    }
}

/// A connector's failure as `entity`'s.
pub fn failure_of(entity: &str, e: crate::connect::connector::ConnectorError) -> Failure {
    Failure::from(e).of(entity)
}
