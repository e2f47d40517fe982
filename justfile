# Everyday tasks. `just --list` shows them.

# Serve on the embedded SQLite store (./sluice.db, secrets in ./.sluice).
run:
    cargo run --release

# The whole test suite, as CI runs it.
test:
    cargo test --workspace

# Formatting and lints, as CI checks them.
lint:
    cargo fmt --all --check
    cargo clippy --workspace --all-targets -- -D warnings

fmt:
    cargo fmt --all

# Regenerate docs/openapi.json after changing a route or a wire type.
openapi:
    SLUICE_UPDATE_OPENAPI=1 cargo test --workspace --test http -- openapi::

# Everything CI does.
ci:
    bash .ci/run
