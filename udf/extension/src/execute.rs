//! One chunk in, its vectors out: the rows' texts planned (chunk.rs), embedded on this thread's
//! client, and each row's float32 bytes copied from the reply into DuckDB's result vector.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use libduckdb_sys::*;

use crate::chunk;
use crate::duck::{cstring, set_null, varchar_rows};
use crate::functions::{Bound, Output};
use crate::local;

pub(crate) unsafe extern "C" fn execute(info: duckdb_function_info, input: duckdb_data_chunk, output: duckdb_vector) {
    let result = catch_unwind(AssertUnwindSafe(|| execute_chunk(info, input, output)));
    let error = match result {
        Ok(Ok(())) => return,
        Ok(Err(message)) => message,
        Err(_) => "embedtext: internal error while embedding".to_string(),
    };
    let message = cstring(&error);
    duckdb_scalar_function_set_error(info, message.as_ptr());
}

unsafe fn execute_chunk(
    info: duckdb_function_info,
    input: duckdb_data_chunk,
    output: duckdb_vector,
) -> Result<(), String> {
    let bound = &*(duckdb_scalar_function_get_bind_data(info) as *const Bound);
    let count = duckdb_data_chunk_get_size(input) as usize;
    if let Output::Text(text) = &bound.output {
        for row in 0..count {
            duckdb_vector_assign_string_element_len(
                output,
                row as idx_t,
                text.as_ptr() as *const _,
                text.len() as idx_t,
            );
        }
        return Ok(());
    }
    let rows = varchar_rows(duckdb_data_chunk_get_vector(input, 0), count);
    let plan = chunk::plan(rows.into_iter());
    let dim = bound.dim;
    let vectors = if plan.distinct.is_empty() {
        None
    } else {
        let client = local::client(&bound.settings)?;
        let deadline = Instant::now() + bound.timeout;
        Some(
            local::block_on(chunk::embed_all(&client, &plan.distinct, &bound.options, dim, deadline))
                .map_err(|e| e.0)?,
        )
    };
    // Each row's float32 bytes go straight from the reply's frames into DuckDB's vector memory.
    let copy_row = |out: &mut [f32], slot: u32| {
        let target = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, dim * 4) };
        vectors.as_ref().unwrap().copy_row(slot as usize, target);
    };
    match bound.output {
        Output::Array => {
            let child = duckdb_array_vector_get_child(output);
            let out = std::slice::from_raw_parts_mut(duckdb_vector_get_data(child) as *mut f32, count * dim);
            for (row, slot) in plan.slots.iter().enumerate() {
                match slot {
                    Some(s) => copy_row(&mut out[row * dim..(row + 1) * dim], *s),
                    None => set_null(output, row),
                }
            }
        }
        Output::List => {
            let filled = plan.slots.iter().filter(|s| s.is_some()).count();
            if duckdb_list_vector_reserve(output, (filled * dim) as idx_t) != DuckDBSuccess
                || duckdb_list_vector_set_size(output, (filled * dim) as idx_t) != DuckDBSuccess
            {
                return Err("embedtext: DuckDB could not make room for the vectors".into());
            }
            let entries = duckdb_vector_get_data(output) as *mut duckdb_list_entry;
            let child = duckdb_list_vector_get_child(output);
            let out = std::slice::from_raw_parts_mut(duckdb_vector_get_data(child) as *mut f32, filled * dim);
            let mut offset = 0usize;
            for (row, slot) in plan.slots.iter().enumerate() {
                match slot {
                    Some(s) => {
                        copy_row(&mut out[offset..offset + dim], *s);
                        *entries.add(row) = duckdb_list_entry {
                            offset: offset as u64,
                            length: dim as u64,
                        };
                        offset += dim;
                    }
                    None => {
                        *entries.add(row) = duckdb_list_entry {
                            offset: offset as u64,
                            length: 0,
                        };
                        set_null(output, row);
                    }
                }
            }
        }
        Output::Text(_) => unreachable!(),
    }
    Ok(())
}
