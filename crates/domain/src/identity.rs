//! Identity: who is calling and what they may do (roles, permissions,
//! principals), users, organizations, invitations and API keys.

pub mod access;
pub mod apikey;
pub mod invitation;
pub mod org;
pub mod user;

pub use access::*;
pub mod ports;
pub mod service;
