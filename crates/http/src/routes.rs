//! Route handlers, one module per area. Each handler turns wire types into a
//! use-case call and the result back into wire types; access rules live in
//! the domain.

pub mod billing;
pub mod catalog;
pub mod connections;
pub mod flows;
pub mod gateway;
pub mod health;
pub mod iac;
pub mod monitoring;
pub mod oauth;
pub mod orgs;
pub mod rules;
pub mod users;
pub mod verifications;

use actix_web::HttpResponse;
use serde::Serialize;

/// 201 with a `Location` header.
pub(crate) fn created<T: Serialize>(location: String, body: &T) -> HttpResponse {
    HttpResponse::Created().insert_header((actix_web::http::header::LOCATION, location)).json(body)
}

/// For PATCH bodies: keeps an explicit `null` apart from an absent field
/// (`#[serde(default, deserialize_with = "super::present")]`).
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}
