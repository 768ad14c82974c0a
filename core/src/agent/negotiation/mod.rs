//! Context negotiation with consent, resolution and execution — one two-party thread
//! from its first context to its outcome: the Receive-Evaluate-Act cycle and its limits
//! (§5.2, §6, `negotiate.rs`), context drift and forks (§6.5, `drift.rs`), consent under
//! the permission tiers (§7, `consent.rs`; the tiers themselves are `agent::permissions`)
//! and its signed receipts (`receipts.rs`),
//! resolution and the human checkpoint (§8, `resolution.rs`), the signed confirmations
//! and the agreement they prove (§8.3, `agreement.rs`), taking back what was shared
//! (`retraction.rs`), the rules shared values travel with (`usage.rs`), and executing what was
//! confirmed (§9, `execution.rs`).

pub(super) mod agreement;
pub(super) mod consent;
pub(super) mod drift;
pub(super) mod execution;
pub(super) mod negotiate;
pub(super) mod receipts;
pub(super) mod resolution;
pub(super) mod retraction;
pub(super) mod usage;

#[cfg(test)]
pub(in crate::agent) mod agreement_tests;
#[cfg(test)]
mod drift_tests;
#[cfg(test)]
mod resolution_tests;
#[cfg(test)]
mod retraction_tests;
#[cfg(test)]
mod turn_tests;
#[cfg(test)]
mod usage_tests;
