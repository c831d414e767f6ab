//! Experiments around evenflush: the virtual-time simulator of the suspension protocol ([`sim`]), the
//! studies built on it ([`studies`]: the paper's Table 1, the scale study to a million ranks) and
//! the swap-versus-offload harness of real runs ([`swap`]).

pub mod cli;
pub mod sim;
pub mod studies;
pub mod swap;
