//! The LLM validation gateway: raw model output in, a clean typed masked
//! object (or a precise drift report) out.

use crate::AppState;
use crate::body::{MAX_ANY_BODY, read_body};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::json_api_error;
use crate::session::Caller;
use actix_web::web::{self, Data};
use actix_web::{HttpResponse, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sluice_domain::FieldError;
use sluice_domain::gateway::service::GatewayResult;
use sluice_domain::gateway::{Finding, Outcome, Repair, RepairKind, TypeMismatch};
use sluice_domain::shared::error::Code;
use sluice_domain::shared::ids::AssetId;
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"asset_id": "01a20900-0000-7000-8000-000000000005", "payload_raw": "Sure! Here it is: {'user_id': '42', 'email': 'ann@example.com',}"})))]
pub struct ValidateBody {
    /// The catalog asset whose contract applies.
    pub asset_id: String,
    /// Raw model output; the object may sit in prose, a fenced block or tags.
    /// `raw_output` is accepted as an alias.
    #[serde(alias = "raw_output")]
    pub payload_raw: String,
    /// Repair kinds that make a valid result fail (`repair_rejected`), for
    /// callers that accept only clean output where it matters.
    #[serde(default)]
    #[schema(value_type = Vec<String>, example = json!(["coerced", "closed_truncated"]))]
    pub reject: Vec<RepairKind>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ValidateMetadata {
    /// `<field>_MASK` for each masked field.
    pub governance_applied: Vec<String>,
    #[schema(value_type = Vec<Object>)]
    pub safety_findings: Vec<Finding>,
    /// Every change made between the raw text and the result, in order:
    /// `{path, kind, detail}` (see docs/gateway.md); empty for strict JSON
    /// that matched exactly.
    #[schema(value_type = Vec<Object>, example = json!([{"path": "$", "kind": "extracted", "detail": "the object at bytes 19..75 of 75 (prose or a code fence around it)"}, {"path": "user_id", "kind": "coerced", "detail": "string \"42\" → integer"}]))]
    pub repairs: Vec<Repair>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct FailureMetadata {
    /// The changes made before the result failed, in order.
    #[schema(value_type = Vec<Object>)]
    pub repairs: Vec<Repair>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ValidateResponse {
    /// `true`.
    pub success: bool,
    /// The coerced, masked object with the asset's fields.
    #[schema(value_type = Object)]
    pub data: Map<String, Value>,
    pub metadata: ValidateMetadata,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DriftDetails {
    pub missing_fields: Vec<String>,
    #[schema(value_type = Vec<Object>)]
    pub type_mismatches: Vec<TypeMismatch>,
}

/// The failure body: `success: false`, `error`, `code` and, for a schema
/// mismatch, `drift_details`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ValidateFailure {
    pub success: bool,
    /// `Schema Validation Failed`, `No JSON object found`, or which
    /// rejected repair the output needed.
    pub error: String,
    /// `schema_validation_failed`, `no_json_found` or `repair_rejected`.
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_details: Option<DriftDetails>,
    /// For a schema failure: a text to send back to the model, naming each
    /// missing field and mismatch with the type expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_prompt: Option<String>,
    /// For a schema failure and a rejected repair: the repairs made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<FailureMetadata>,
}

/// Extracts, coerces, masks and validates one model output against a
/// catalog asset. Takes an organization API key (`X-Api-Key`).
#[utoipa::path(tag = "gateway", security(("api_key" = [])), request_body = ValidateBody, responses(
    (status = 200, body = ValidateResponse),
    (status = 401, body = ErrorBody),
    (status = 404, description = "unknown asset", body = ErrorBody),
    (status = 422, description = "schema mismatch or no JSON object", body = ValidateFailure),
    (status = 429, description = "the monthly validation quota is used up (`quota_exceeded`)", body = ErrorBody)))]
#[post("/gateway/validate")]
pub async fn validate(state: Data<AppState>, caller: Caller, body: web::Payload) -> ApiResult<HttpResponse> {
    // Model output with long prose around the object is common: up to
    // 4 MiB here (the other JSON endpoints take 1 MiB).
    let bytes = read_body(&mut body.into_inner(), MAX_ANY_BODY).await?;
    // A body of megabytes takes milliseconds to parse: off the request
    // threads too, on the extraction's bounded pool.
    let parsed = if bytes.len() <= sluice_domain::gateway::service::INLINE_PAYLOAD {
        serde_json::from_slice::<ValidateBody>(&bytes)
    } else {
        state.sluice.gateway.off_thread(move || serde_json::from_slice::<ValidateBody>(&bytes)).await?
    };
    let b = parsed.map_err(|e| json_api_error(actix_web::error::JsonPayloadError::Deserialize(e)))?;
    let asset = Uuid::parse_str(b.asset_id.trim())
        .map_err(|_| ApiError::validation(vec![FieldError::new("asset_id", "must be a UUID")]))?;
    let result = state
        .sluice
        .gateway
        .validate_rejecting(&caller.principal, AssetId::from(asset), &b.payload_raw, &b.reject)
        .await?;
    Ok(match result {
        GatewayResult::Checked(Outcome::Valid { data, governance_applied, safety_findings, repairs }) => {
            HttpResponse::Ok().json(ValidateResponse {
                success: true,
                data,
                metadata: ValidateMetadata { governance_applied, safety_findings, repairs },
            })
        }
        GatewayResult::Checked(Outcome::Invalid { missing_fields, type_mismatches, repairs, retry_prompt }) => {
            failure(Code::SchemaValidationFailed).json(ValidateFailure {
                success: false,
                error: "Schema Validation Failed".into(),
                code: Code::SchemaValidationFailed.as_str().into(),
                drift_details: Some(DriftDetails { missing_fields, type_mismatches }),
                retry_prompt: Some(retry_prompt),
                metadata: Some(FailureMetadata { repairs }),
            })
        }
        GatewayResult::Rejected { repairs } => {
            let mut kinds: Vec<&str> =
                repairs.iter().filter(|r| b.reject.contains(&r.kind)).map(|r| r.kind.as_str()).collect();
            kinds.dedup();
            failure(Code::RepairRejected).json(ValidateFailure {
                success: false,
                error: format!("The output needed a rejected repair ({})", kinds.join(", ")),
                code: Code::RepairRejected.as_str().into(),
                drift_details: None,
                retry_prompt: None,
                metadata: Some(FailureMetadata { repairs }),
            })
        }
        GatewayResult::NoJson => failure(Code::NoJsonFound).json(ValidateFailure {
            success: false,
            error: "No JSON object found".into(),
            code: Code::NoJsonFound.as_str().into(),
            drift_details: None,
            retry_prompt: None,
            metadata: None,
        }),
    })
}

/// A validation's failure, with its code's status.
fn failure(code: Code) -> actix_web::HttpResponseBuilder {
    HttpResponse::build(crate::error::status_of(code.kind()))
}
