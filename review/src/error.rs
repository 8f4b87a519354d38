/// Why a policy could not give an answer (a rejection is an answer, not an error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The document holds neither an AdmissionRequest nor an AdmissionReview.
    #[error("expected an AdmissionRequest or an AdmissionReview object, found {found}")]
    NotARequest { found: &'static str },
    /// The module could not be loaded, instantiated or called (a trap, a guest error, the
    /// deadline).
    #[error("the policy failed in `{operation}`")]
    Module {
        operation: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The policy answered something that is not the expected JSON.
    #[error("the policy's answer to `{operation}` is not valid")]
    Answer {
        operation: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An AdmissionResponse's patch is not base64 of a JSONPatch.
    #[error("the AdmissionResponse's patch is not a base64 JSONPatch")]
    Patch {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
