//! Placeholder: the experiments issue fills this crate with the swap-versus-offload harness and the
//! scale issue with the protocol simulator. Nothing here yet.
