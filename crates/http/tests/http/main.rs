//! The HTTP tests, in process over the in-memory adapters: one binary (one
//! link, one run), one module per area, and one helper set (`support`).

#[macro_use]
mod support;

mod api;
mod connections;
mod iac;
mod openapi;
