//! Small safe wrappers over DuckDB's C API (through the function table DuckDB hands the extension).

use std::ffi::{c_void, CStr, CString};
use std::ptr::null_mut;

use libduckdb_sys::*;

/// An owned logical type, destroyed on drop.
pub struct LogicalType(pub duckdb_logical_type);

impl LogicalType {
    pub fn of(type_id: DUCKDB_TYPE) -> LogicalType {
        LogicalType(unsafe { duckdb_create_logical_type(type_id) })
    }
    pub fn varchar() -> LogicalType {
        LogicalType::of(DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR)
    }
    /// FLOAT[size]
    pub fn float_array(size: usize) -> LogicalType {
        let float = LogicalType::of(DUCKDB_TYPE_DUCKDB_TYPE_FLOAT);
        LogicalType(unsafe { duckdb_create_array_type(float.0, size as idx_t) })
    }
    /// FLOAT[]
    pub fn float_list() -> LogicalType {
        let float = LogicalType::of(DUCKDB_TYPE_DUCKDB_TYPE_FLOAT);
        LogicalType(unsafe { duckdb_create_list_type(float.0) })
    }
    /// STRUCT(chunk_index INTEGER, char_start INTEGER, char_end INTEGER, tokens INTEGER, text VARCHAR,
    /// embedding FLOAT[dim])[]: embed_text_chunks' result, as the Python function's (udf/text_chunks.py).
    pub fn chunk_list(dim: usize) -> LogicalType {
        let integer = || LogicalType::of(DUCKDB_TYPE_DUCKDB_TYPE_INTEGER);
        let members = [
            integer(),
            integer(),
            integer(),
            integer(),
            LogicalType::varchar(),
            LogicalType::float_array(dim),
        ];
        let names: Vec<CString> = CHUNK_FIELDS.iter().map(|n| cstring(n)).collect();
        let mut types: Vec<duckdb_logical_type> = members.iter().map(|t| t.0).collect();
        let mut name_ptrs: Vec<*const std::ffi::c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let item = LogicalType(unsafe {
            duckdb_create_struct_type(types.as_mut_ptr(), name_ptrs.as_mut_ptr(), members.len() as idx_t)
        });
        LogicalType(unsafe { duckdb_create_list_type(item.0) })
    }
}

/// The fields of each chunk embed_text_chunks gives, in order (udf/text_chunks.py CHUNK_FIELDS).
pub const CHUNK_FIELDS: [&str; 6] = ["chunk_index", "char_start", "char_end", "tokens", "text", "embedding"];

impl Drop for LogicalType {
    fn drop(&mut self) {
        unsafe { duckdb_destroy_logical_type(&mut self.0) }
    }
}

pub fn cstring(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap()
}

/// A DuckDB value as text (None for NULL or a missing value); the value is destroyed.
pub unsafe fn take_text(mut value: duckdb_value) -> Option<String> {
    if value.is_null() {
        return None;
    }
    let text = if duckdb_is_null_value(value) {
        None
    } else {
        let raw = duckdb_get_varchar(value);
        let text = (!raw.is_null()).then(|| CStr::from_ptr(raw).to_string_lossy().into_owned());
        duckdb_free(raw as *mut c_void);
        text
    };
    duckdb_destroy_value(&mut value);
    text
}

/// A client context borrowed for a bind, destroyed on drop.
pub struct ClientContext(pub duckdb_client_context);

impl ClientContext {
    pub unsafe fn of_scalar_bind(info: duckdb_bind_info) -> ClientContext {
        let mut context: duckdb_client_context = null_mut();
        duckdb_scalar_function_get_client_context(info, &mut context);
        ClientContext(context)
    }

    /// A DuckDB option's value in this context (None: unset or empty).
    pub fn option(&self, name: &str) -> Option<String> {
        if self.0.is_null() {
            return None;
        }
        let name = cstring(name);
        let mut scope: duckdb_config_option_scope = 0;
        unsafe {
            take_text(duckdb_client_context_get_config_option(
                self.0,
                name.as_ptr(),
                &mut scope,
            ))
        }
        .filter(|v| !v.is_empty())
    }

    /// The value of a constant argument of a scalar function being bound (None: NULL).
    pub unsafe fn constant_argument(&self, info: duckdb_bind_info, index: usize) -> Result<Option<String>, String> {
        let mut expr = duckdb_scalar_function_bind_get_argument(info, index as idx_t);
        if expr.is_null() {
            return Ok(None);
        }
        let result = if !duckdb_expression_is_foldable(expr) {
            Err("must be a constant".to_string())
        } else {
            let mut value: duckdb_value = null_mut();
            let mut error = duckdb_expression_fold(self.0, expr, &mut value);
            if !error.is_null() && duckdb_error_data_has_error(error) {
                let message = CStr::from_ptr(duckdb_error_data_message(error))
                    .to_string_lossy()
                    .into_owned();
                duckdb_destroy_error_data(&mut error);
                Err(message)
            } else {
                if !error.is_null() {
                    duckdb_destroy_error_data(&mut error);
                }
                Ok(take_text(value))
            }
        };
        duckdb_destroy_expression(&mut expr);
        result
    }
}

impl Drop for ClientContext {
    fn drop(&mut self) {
        if !self.0.is_null() {
            unsafe { duckdb_destroy_client_context(&mut self.0) }
        }
    }
}

/// The text of each row of a flat VARCHAR vector (None for NULL).
pub unsafe fn varchar_rows<'a>(vector: duckdb_vector, count: usize) -> Vec<Option<&'a [u8]>> {
    let data = duckdb_vector_get_data(vector) as *mut duckdb_string_t;
    let validity = duckdb_vector_get_validity(vector);
    (0..count)
        .map(|row| {
            if !validity.is_null() && !duckdb_validity_row_is_valid(validity, row as idx_t) {
                return None;
            }
            let string = data.add(row);
            let len = duckdb_string_t_length(*string) as usize;
            let ptr = duckdb_string_t_data(string) as *const u8;
            Some(if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(ptr, len)
            })
        })
        .collect()
}

pub unsafe fn set_null(vector: duckdb_vector, row: usize) {
    duckdb_vector_ensure_validity_writable(vector);
    duckdb_validity_set_row_invalid(duckdb_vector_get_validity(vector), row as idx_t);
}

/// A VARCHAR setting (`SET name = '...'`), empty by default.
pub unsafe fn register_text_option(con: duckdb_connection, name: &str, description: &str) -> Result<(), String> {
    let mut option = duckdb_create_config_option();
    let (cname, cdescription, empty) = (cstring(name), cstring(description), cstring(""));
    duckdb_config_option_set_name(option, cname.as_ptr());
    let varchar = LogicalType::varchar();
    duckdb_config_option_set_type(option, varchar.0);
    let mut default = duckdb_create_varchar(empty.as_ptr());
    duckdb_config_option_set_default_value(option, default);
    duckdb_destroy_value(&mut default);
    duckdb_config_option_set_description(option, cdescription.as_ptr());
    let state = duckdb_register_config_option(con, option);
    duckdb_destroy_config_option(&mut option);
    if state != DuckDBSuccess {
        return Err(format!("embedtext: DuckDB refused the setting {name}"));
    }
    Ok(())
}
