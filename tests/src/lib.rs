//! End to end: the built policy module through waPC (tests/), the host against the simulated
//! cluster, and the demo. The library holds what those share: the policy as the simulator's
//! admission webhook, and the demo's story.

pub mod admission;
pub mod audit;
pub mod demo;

pub use admission::PolicyAdmission;
