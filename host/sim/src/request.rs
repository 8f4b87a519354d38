//! Who makes a request, and what goes back to them besides the object.

/// The caller of one API request and the warnings its answer carries.
#[derive(Debug, Default, Clone)]
pub struct Ctx {
    pub user: String,
    pub dry_run: bool,
    pub warnings: Vec<String>,
}

impl Ctx {
    pub fn user(user: &str) -> Self {
        Self {
            user: user.to_string(),
            ..Self::default()
        }
    }
}
