//! Connecting to data: the connector vocabulary and ports, integrations
//! with their credentials, connections, OAuth, and the use cases that
//! test, discover and preview them.

pub mod changes;
pub mod connection;
pub mod connector;
pub mod integration;
pub mod oauth;
pub mod ports;
pub mod position;
pub mod registry;
pub mod secret_policy;
pub mod service;
