//! One chunk in, its vectors out: the rows' texts planned (chunk.rs), embedded on this thread's
//! client, and each row's float32 bytes copied from the reply into DuckDB's result vector.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use libduckdb_sys::*;

use crate::chunk;
use crate::client::Chunking;
use crate::duck::{cstring, set_null, varchar_rows};
use crate::functions::{Bound, Output};
use crate::local;
use crate::settings::OnError;

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
    if let Output::Chunks(chunking) = bound.output {
        return write_chunks(bound, chunking, &rows, output);
    }
    let plan = chunk::plan(rows.into_iter());
    let dim = bound.dim;
    let vectors = if plan.distinct.is_empty() {
        None
    } else {
        let client = local::client(&bound.settings)?;
        let deadline = Instant::now() + bound.timeout;
        Some(
            local::block_on(chunk::embed_all(
                &client,
                &plan.distinct,
                &bound.options,
                dim,
                deadline,
                bound.on_error,
            ))
            .map_err(|e| e.message)?,
        )
    };
    // Each row's float32 bytes go straight from the reply's frames into DuckDB's vector memory.
    let copy_row = |out: &mut [f32], slot: u32| {
        let target = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, dim * 4) };
        vectors.as_ref().unwrap().copy_row(slot as usize, target);
    };
    // A row's slot, where it has a vector: not a NULL or blank text, nor one the server refused.
    let slots: Vec<Option<u32>> = plan
        .slots
        .iter()
        .map(|slot| slot.filter(|s| vectors.as_ref().is_some_and(|v| v.has(*s as usize))))
        .collect();
    match bound.output {
        Output::Array => {
            let child = duckdb_array_vector_get_child(output);
            let out = std::slice::from_raw_parts_mut(duckdb_vector_get_data(child) as *mut f32, count * dim);
            for (row, slot) in slots.iter().enumerate() {
                match slot {
                    Some(s) => copy_row(&mut out[row * dim..(row + 1) * dim], *s),
                    None => set_null(output, row),
                }
            }
        }
        Output::List => {
            let filled = slots.iter().filter(|s| s.is_some()).count();
            if duckdb_list_vector_reserve(output, (filled * dim) as idx_t) != DuckDBSuccess
                || duckdb_list_vector_set_size(output, (filled * dim) as idx_t) != DuckDBSuccess
            {
                return Err("embedtext: DuckDB could not make room for the vectors".into());
            }
            let entries = duckdb_vector_get_data(output) as *mut duckdb_list_entry;
            let child = duckdb_list_vector_get_child(output);
            let out = std::slice::from_raw_parts_mut(duckdb_vector_get_data(child) as *mut f32, filled * dim);
            let mut offset = 0usize;
            for (row, slot) in slots.iter().enumerate() {
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
        Output::Text(_) | Output::Chunks(_) => unreachable!(),
    }
    Ok(())
}

/// embed_text_chunks: each row's chunks (NULL for a NULL text, none for a blank one), cut by the
/// server and each embedded as embed_text embeds a text, as a list of structs.
unsafe fn write_chunks(
    bound: &Bound,
    chunking: Chunking,
    rows: &[Option<&[u8]>],
    output: duckdb_vector,
) -> Result<(), String> {
    let texts: Vec<&[u8]> = rows.iter().flatten().copied().collect();
    let client = local::client(&bound.settings)?;
    let deadline = Instant::now() + bound.timeout;
    let dim = bound.dim;
    let (per_text, slots, vectors) = local::block_on(async {
        let per_text = chunk::split_all(&client, &texts, chunking, &bound.options, deadline).await?;
        let chunk_texts: Vec<Option<&[u8]>> = per_text.iter().flatten().map(|c| Some(c.text)).collect();
        let plan = chunk::plan(chunk_texts.into_iter());
        let vectors = if plan.distinct.is_empty() {
            None
        } else {
            Some(chunk::embed_all(&client, &plan.distinct, &bound.options, dim, deadline, OnError::Fail).await?)
        };
        Ok::<_, crate::client::EmbedError>((per_text, plan.slots, vectors))
    })
    .map_err(|e| e.message)?;
    let total = slots.len();
    if duckdb_list_vector_reserve(output, total as idx_t) != DuckDBSuccess
        || duckdb_list_vector_set_size(output, total as idx_t) != DuckDBSuccess
    {
        return Err("embedtext: DuckDB could not make room for the chunks".into());
    }
    let entries = duckdb_vector_get_data(output) as *mut duckdb_list_entry;
    let items = duckdb_list_vector_get_child(output);
    let field = |i: usize| duckdb_struct_vector_get_child(items, i as idx_t);
    let ints = |i: usize| std::slice::from_raw_parts_mut(duckdb_vector_get_data(field(i)) as *mut i32, total);
    let (index, start, end, tokens) = (ints(0), ints(1), ints(2), ints(3));
    let text = field(4);
    let embedding = duckdb_array_vector_get_child(field(5));
    let floats = std::slice::from_raw_parts_mut(duckdb_vector_get_data(embedding) as *mut u8, total * dim * 4);
    let mut chunks = per_text.iter();
    let mut at = 0usize;
    for (row, value) in rows.iter().enumerate() {
        let first = at;
        if value.is_some() {
            for c in chunks.next().into_iter().flatten() {
                (index[at], start[at], end[at], tokens[at]) = (c.index, c.start, c.end, c.tokens);
                duckdb_vector_assign_string_element_len(
                    text,
                    at as idx_t,
                    c.text.as_ptr() as *const _,
                    c.text.len() as idx_t,
                );
                let out = &mut floats[at * dim * 4..(at + 1) * dim * 4];
                match (slots[at], vectors.as_ref()) {
                    (Some(slot), Some(v)) if v.copy_row(slot as usize, out) => {}
                    _ => set_null(field(5), at), // a chunk of only whitespace: no vector, as embed_text gives
                }
                at += 1;
            }
        } else {
            set_null(output, row);
        }
        *entries.add(row) = duckdb_list_entry {
            offset: first as u64,
            length: (at - first) as u64,
        };
    }
    Ok(())
}
