//! `embed_text` in every DuckDB client: a loadable extension on DuckDB's stable C extension API
//! that sends a chunk's texts to an embedtext server over gRPC and writes the reply's float32
//! values into the result vector. The Python UDF (udf/chunk.py) is its specification.

pub mod chunk;
pub mod client;
mod duck;
mod execute;
mod functions;
mod local;
pub mod settings;
mod unary;

pub mod proto {
    tonic::include_proto!("embedtext.v1");
}

use std::panic::{catch_unwind, AssertUnwindSafe};

use libduckdb_sys::{duckdb_extension_access, duckdb_extension_info, duckdb_rs_extension_api_init};

/// The C API version the extension needs: DuckDB 1.5.6 or later (the 1.5.6 CLI, DuckDB 2.0).
pub const C_API_VERSION: &str = "v1.5.6";

/// DuckDB's entry point for `embedtext.duckdb_extension`: `<name>_init_c_api`.
///
/// # Safety
/// Called by DuckDB with the handles of the database loading the extension.
#[no_mangle]
pub unsafe extern "C" fn embedtext_init_c_api(
    info: duckdb_extension_info,
    access: *const duckdb_extension_access,
) -> bool {
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<bool, String> {
        if !duckdb_rs_extension_api_init(info, access, C_API_VERSION).map_err(str::to_string)? {
            return Ok(false); // DuckDB refused the API version and has said why
        }
        let database = (*access).get_database.ok_or("embedtext: DuckDB gave no database")?(info);
        functions::init(database)?;
        Ok(true)
    }))
    .unwrap_or_else(|_| Err("embedtext: internal error while loading".into()));
    match result {
        Ok(loaded) => loaded,
        Err(message) => {
            if let Some(set_error) = (*access).set_error {
                let message = std::ffi::CString::new(message.replace('\0', " ")).unwrap();
                set_error(info, message.as_ptr());
            }
            false
        }
    }
}
