//! sea-orm models of the metadata tables. They never leave this crate.
//!
//! Each `table!` below is one table: its name, its key columns, then its
//! other columns, in the order of the migrations that made them.

/// One table's module: its sea-orm `Model` (so `Entity`, `Column`,
/// `ActiveModel`), with no relations.
macro_rules! table {
    (
        $(#[$doc:meta])*
        $name:ident = $table:literal, key($($key:ident: $key_type:ty),+ $(,)?);
        $($(#[$attr:meta])* $column:ident: $column_type:ty),* $(,)?
    ) => {
        $(#[$doc])*
        pub mod $name {
            use sea_orm::entity::prelude::*;

            #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
            #[sea_orm(table_name = $table)]
            pub struct Model {
                $(
                    #[sea_orm(primary_key, auto_increment = false)]
                    pub $key: $key_type,
                )+
                $(
                    $(#[$attr])*
                    pub $column: $column_type,
                )*
            }

            #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
            pub enum Relation {}

            impl ActiveModelBehavior for ActiveModel {}
        }
    };
}

table! {
    /// The `activity_events` table.
    activity_events = "activity_events", key(id: Uuid);
    org_id: Uuid,
    #[sea_orm(column_name = "type")]
    event_type: String,
    severity: String,
    message: String,
    data: Json,
    created_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `api_keys` table.
    api_keys = "api_keys", key(id: Uuid);
    org_id: Uuid,
    name: String,
    prefix: String,
    key_hash: String,
    roles: String,
    created_at: TimeDateTimeWithTimeZone,
    last_used_at: Option<TimeDateTimeWithTimeZone>,
    revoked_at: Option<TimeDateTimeWithTimeZone>,
}

table! {
    /// The `audit_logs` table.
    audit_logs = "audit_logs", key(id: Uuid);
    org_id: Option<Uuid>,
    actor_type: String,
    actor_id: Option<String>,
    actor_name: Option<String>,
    action: String,
    resource_type: String,
    resource_id: Option<String>,
    details: Json,
    created_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `billing_events` table: payment-provider events already processed.
    billing_events = "billing_events", key(id: String);
    event_type: String,
    org_id: Option<Uuid>,
    received_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `connections` table.
    connections = "connections", key(id: Uuid);
    org_id: Uuid,
    name: String,
    integration_id: Option<Uuid>,
    #[sea_orm(column_name = "type")]
    connector_type: String,
    capability: String,
    config: Json,
    /// Encrypted JSON object (see `crypto`).
    secrets: String,
    status: String,
    last_tested_at: Option<TimeDateTimeWithTimeZone>,
    last_error: Option<String>,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `cursors` table.
    cursors = "cursors", key(flow_id: Uuid, entity: String);
    cursor_field: Option<String>,
    cursor_value: Option<String>,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `data_asset_versions` table.
    data_asset_versions = "data_asset_versions", key(id: Uuid);
    asset_id: Uuid,
    version: i32,
    fields: Json,
    change: String,
    created_at: TimeDateTimeWithTimeZone,
    created_by: Option<String>,
}

table! {
    /// The `data_assets` table.
    data_assets = "data_assets", key(id: Uuid);
    org_id: Uuid,
    name: String,
    kind: String,
    version: i32,
    fields: Json,
    description: Option<String>,
    connection_id: Option<Uuid>,
    entity: Option<String>,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `flows` table.
    flows = "flows", key(id: Uuid);
    org_id: Uuid,
    name: String,
    source_connection_id: Uuid,
    destination_connection_id: Uuid,
    schedule: Option<String>,
    config: Json,
    status: String,
    next_run_at: Option<TimeDateTimeWithTimeZone>,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `idempotency_keys` table.
    idempotency_keys = "idempotency_keys", key(scope: String, key: String);
    fingerprint: String,
    status: Option<i32>,
    body: Option<Vec<u8>>,
    content_type: Option<String>,
    location: Option<String>,
    created_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `integrations` table.
    integrations = "integrations", key(id: Uuid);
    org_id: Uuid,
    name: String,
    #[sea_orm(column_name = "type")]
    integration_type: String,
    /// Encrypted JSON object (see `crypto`).
    credentials: String,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `invitations` table.
    invitations = "invitations", key(id: Uuid);
    org_id: Uuid,
    email: String,
    role: String,
    status: String,
    token_hash: String,
    expires_at: TimeDateTimeWithTimeZone,
    created_at: TimeDateTimeWithTimeZone,
    invited_by: Option<Uuid>,
    accepted_by: Option<Uuid>,
    accepted_at: Option<TimeDateTimeWithTimeZone>,
}

table! {
    /// The `memberships` table.
    memberships = "memberships", key(id: Uuid);
    org_id: Uuid,
    user_id: Uuid,
    role: String,
    joined_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `notification_rules` table.
    notification_rules = "notification_rules", key(id: Uuid);
    org_id: Uuid,
    name: String,
    event: String,
    flow_id: Option<Uuid>,
    channel_type: String,
    url: String,
    /// The signing secret, encrypted.
    secret: Option<String>,
    enabled: bool,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `oauth_states` table.
    oauth_states = "oauth_states", key(id: String);
    org_id: Uuid,
    provider: String,
    integration_name: String,
    verifier: String,
    actor: Json,
    expires_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `organizations` table.
    organizations = "organizations", key(id: Uuid);
    name: String,
    slug: String,
    plan: String,
    billing_status: String,
    current_period_end: Option<TimeDateTimeWithTimeZone>,
    customer_id: Option<String>,
    created_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `run_logs` table.
    run_logs = "run_logs", key(id: Uuid);
    run_id: Uuid,
    ts: TimeDateTimeWithTimeZone,
    level: String,
    entity: Option<String>,
    message: String,
}

table! {
    /// The `run_markers` table.
    run_markers = "run_markers", key(key: String);
    run_id: Uuid,
    created_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `runs` table.
    runs = "runs", key(id: Uuid);
    org_id: Uuid,
    flow_id: Uuid,
    trace_id: Uuid,
    trigger: String,
    status: String,
    queued_at: TimeDateTimeWithTimeZone,
    started_at: Option<TimeDateTimeWithTimeZone>,
    finished_at: Option<TimeDateTimeWithTimeZone>,
    entities: Json,
    error: Option<String>,
    attempt: i32,
    claimed_by: Option<String>,
    heartbeat_at: Option<TimeDateTimeWithTimeZone>,
    not_before: Option<TimeDateTimeWithTimeZone>,
}

table! {
    /// The `users` table.
    users = "users", key(id: Uuid);
    issuer: String,
    subject: String,
    email: Option<String>,
    name: Option<String>,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `stream_drops` table: change streams left on a source, to drop.
    stream_drops = "stream_drops", key(id: Uuid);
    org_id: Uuid,
    connection_id: Uuid,
    stream: String,
    flow_id: Uuid,
    flow_name: String,
    error: String,
    attempts: i32,
    created_at: TimeDateTimeWithTimeZone,
    tried_at: TimeDateTimeWithTimeZone,
}

table! {
    /// The `validation_counts` table: gateway validations per organization and
    /// month, on one or more rows (`shard`); the month's count is their sum.
    validation_counts = "validation_counts", key(org_id: Uuid, month: String, shard: i16);
    count: i64,
}

table! {
    /// The `verifications` table.
    verifications = "verifications", key(id: Uuid);
    org_id: Uuid,
    flow_id: Uuid,
    status: String,
    requested: Json,
    repair: bool,
    entities: Json,
    error: Option<String>,
    queued_at: TimeDateTimeWithTimeZone,
    started_at: Option<TimeDateTimeWithTimeZone>,
    finished_at: Option<TimeDateTimeWithTimeZone>,
    claimed_by: Option<String>,
    claimed_until: Option<TimeDateTimeWithTimeZone>,
    repair_run_id: Option<Uuid>,
}

table! {
    /// The `webhook_deliveries` table: the outbox of notification deliveries.
    webhook_deliveries = "webhook_deliveries", key(id: Uuid);
    org_id: Uuid,
    rule_id: Uuid,
    event_id: Uuid,
    event_type: String,
    message_id: String,
    body: String,
    status: String,
    attempts: i32,
    response_code: Option<i32>,
    error: Option<String>,
    next_attempt_at: Option<TimeDateTimeWithTimeZone>,
    claimed_by: Option<String>,
    claimed_until: Option<TimeDateTimeWithTimeZone>,
    created_at: TimeDateTimeWithTimeZone,
    updated_at: TimeDateTimeWithTimeZone,
}
