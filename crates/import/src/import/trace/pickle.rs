//! The subset of Python's pickle that a Flight Recorder dump uses, read into JSON values:
//! dicts, lists, tuples, strings, bytes, ints, floats, booleans and None (protocols 2–5, as
//! `pickle.dump` and PyTorch's C++ pickler write them, including its `build_intlist`-style
//! typed lists). Anything else (objects, tensors, any other global) is refused, not run:
//! nothing in a file is ever executed.

use serde_json::{Map, Number, Value};
use std::io::Read;

/// The most a pickle may weigh here (a dump of 20,000 entries is a few MB).
const MAX_PICKLE_BYTES: u64 = 512 << 20;

#[derive(Clone)]
enum Item {
    Mark,
    Value(Value),
    /// A global that builds a plain list from its argument (PyTorch's typed lists).
    ListBuilder,
}

fn take<'a>(data: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let s = data
        .get(*at..*at + n)
        .ok_or_else(|| format!("pickle ends inside an opcode at byte {}", *at))?;
    *at += n;
    Ok(s)
}

fn key_of(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

fn since_mark(stack: &mut Vec<Item>) -> Result<Vec<Value>, String> {
    let mark = stack
        .iter()
        .rposition(|i| matches!(i, Item::Mark))
        .ok_or("pickle pops to a mark it never set")?;
    let items: Vec<Item> = stack.drain(mark..).skip(1).collect();
    items
        .into_iter()
        .map(|i| match i {
            Item::Value(v) => Ok(v),
            _ => Err("pickle holds an object ncclprobe does not read".to_string()),
        })
        .collect()
}

fn pop(stack: &mut Vec<Item>) -> Result<Value, String> {
    match stack.pop() {
        Some(Item::Value(v)) => Ok(v),
        _ => Err("pickle pops an empty stack".into()),
    }
}

fn int(n: i128) -> Value {
    if let Ok(v) = i64::try_from(n) {
        Value::Number(v.into())
    } else if let Ok(v) = u64::try_from(n) {
        Value::Number(v.into())
    } else {
        Number::from_f64(n as f64).map_or(Value::Null, Value::Number)
    }
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Read a pickle into a JSON value.
pub fn read(reader: impl Read) -> Result<Value, String> {
    let mut data = Vec::new();
    if !crate::bounded::read_to_cap(reader, MAX_PICKLE_BYTES, &mut data)
        .map_err(|e| e.to_string())?
    {
        return Err(format!(
            "pickle is larger than {} MiB",
            MAX_PICKLE_BYTES >> 20
        ));
    }
    let mut stack: Vec<Item> = Vec::new();
    let mut memo: std::collections::HashMap<u64, Item> = Default::default();
    let mut at = 0usize;
    loop {
        let op = *take(&data, &mut at, 1)?.first().unwrap_or(&b'.');
        match op {
            0x80 => {
                take(&data, &mut at, 1)?;
            }
            0x95 => {
                take(&data, &mut at, 8)?;
            }
            b'.' => return pop(&mut stack),
            b'(' => stack.push(Item::Mark),
            b'}' => stack.push(Item::Value(Value::Object(Map::new()))),
            b']' | 0x8f => stack.push(Item::Value(Value::Array(Vec::new()))),
            b')' => stack.push(Item::Value(Value::Array(Vec::new()))),
            b'N' => stack.push(Item::Value(Value::Null)),
            0x88 => stack.push(Item::Value(Value::Bool(true))),
            0x89 => stack.push(Item::Value(Value::Bool(false))),
            b'K' | b'M' | b'J' | 0x8a | b'G' | 0x8c | b'X' | 0x8d | b'C' | b'B' | 0x8e => {
                stack.push(Item::Value(scalar(op, &data, &mut at)?))
            }
            0x94 => {
                let top = stack
                    .last()
                    .cloned()
                    .ok_or("pickle memoizes an empty stack")?;
                memo.insert(memo.len() as u64, top);
            }
            b'q' | b'r' => {
                let idx = if op == b'q' {
                    take(&data, &mut at, 1)?[0] as u64
                } else {
                    u32::from_le_bytes(take(&data, &mut at, 4)?.try_into().unwrap_or([0; 4])) as u64
                };
                let top = stack
                    .last()
                    .cloned()
                    .ok_or("pickle memoizes an empty stack")?;
                memo.insert(idx, top);
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    take(&data, &mut at, 1)?[0] as u64
                } else {
                    u32::from_le_bytes(take(&data, &mut at, 4)?.try_into().unwrap_or([0; 4])) as u64
                };
                stack.push(
                    memo.get(&idx)
                        .cloned()
                        .ok_or("pickle reads a memo it never wrote")?,
                )
            }
            b's' => {
                let v = pop(&mut stack)?;
                let k = pop(&mut stack)?;
                dict_insert(&mut stack, vec![k, v])?;
            }
            b'u' => {
                let items = since_mark(&mut stack)?;
                dict_insert(&mut stack, items)?;
            }
            b'a' => {
                let v = pop(&mut stack)?;
                list_extend(&mut stack, vec![v])?;
            }
            b'e' | 0x90 => {
                let items = since_mark(&mut stack)?;
                list_extend(&mut stack, items)?;
            }
            b't' | 0x91 => {
                let items = since_mark(&mut stack)?;
                stack.push(Item::Value(Value::Array(items)))
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(pop(&mut stack)?);
                }
                items.reverse();
                stack.push(Item::Value(Value::Array(items)))
            }
            b'c' => {
                // GLOBAL "module\nname\n": only PyTorch's typed-list builders are accepted.
                let line = |at: &mut usize| -> Result<String, String> {
                    let end = data[*at..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .ok_or("pickle GLOBAL without its name")?;
                    let s = String::from_utf8_lossy(&data[*at..*at + end]).into_owned();
                    *at += end + 1;
                    Ok(s)
                };
                let module = line(&mut at)?;
                let name = line(&mut at)?;
                stack.push(global(&module, &name)?);
            }
            0x93 => {
                let name = key_of(pop(&mut stack)?);
                let module = key_of(pop(&mut stack)?);
                stack.push(global(&module, &name)?);
            }
            b'R' => {
                let args = pop(&mut stack)?;
                match stack.pop() {
                    Some(Item::ListBuilder) => {
                        let list = args
                            .as_array()
                            .and_then(|a| a.first())
                            .cloned()
                            .unwrap_or(Value::Array(vec![]));
                        stack.push(Item::Value(list))
                    }
                    _ => {
                        return Err("pickle calls something other than a typed-list builder".into())
                    }
                }
            }
            other => {
                return Err(format!(
                    "pickle opcode 0x{other:02x} at byte {} is not one a Flight Recorder dump uses",
                    at - 1
                ))
            }
        }
    }
}

/// A number or a string, read after its opcode.
fn scalar(op: u8, data: &[u8], at: &mut usize) -> Result<Value, String> {
    let le4 = |b: &[u8]| b.try_into().unwrap_or([0; 4]);
    Ok(match op {
        b'K' => int(take(data, at, 1)?[0] as i128),
        b'M' => {
            let b = take(data, at, 2)?;
            int(u16::from_le_bytes([b[0], b[1]]) as i128)
        }
        b'J' => int(i32::from_le_bytes(le4(take(data, at, 4)?)) as i128),
        0x8a => {
            let n = take(data, at, 1)?[0] as usize;
            let b = take(data, at, n)?;
            if n > 16 {
                return Err("pickle holds an integer wider than 128 bits".into());
            }
            let mut v: i128 = 0;
            for (i, byte) in b.iter().enumerate() {
                v |= (*byte as i128) << (8 * i);
            }
            if n > 0 && n < 16 && b[n - 1] & 0x80 != 0 {
                v -= 1i128 << (8 * n);
            }
            int(v)
        }
        b'G' => float(f64::from_be_bytes(
            take(data, at, 8)?.try_into().unwrap_or([0; 8]),
        )),
        _ => {
            let len = match op {
                0x8c | b'C' => take(data, at, 1)?[0] as usize,
                b'X' | b'B' => u32::from_le_bytes(le4(take(data, at, 4)?)) as usize,
                _ => u64::from_le_bytes(take(data, at, 8)?.try_into().unwrap_or([0; 8])) as usize,
            };
            Value::String(String::from_utf8_lossy(take(data, at, len)?).into_owned())
        }
    })
}

fn global(module: &str, name: &str) -> Result<Item, String> {
    // Typed lists (`build_intlist`, ...) and older builds' `restore_type_tag(obj, type)`
    // both hand back their first argument.
    if module == "torch.jit._pickle"
        && ((name.starts_with("build_") && name.ends_with("list")) || name == "restore_type_tag")
    {
        Ok(Item::ListBuilder)
    } else {
        Err(format!(
            "pickle refers to {module}.{name}, which ncclprobe does not run"
        ))
    }
}

fn dict_insert(stack: &mut [Item], items: Vec<Value>) -> Result<(), String> {
    let Some(Item::Value(Value::Object(map))) = stack.last_mut() else {
        return Err("pickle sets items on something that is not a dict".into());
    };
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        map.insert(key_of(k), v);
    }
    Ok(())
}

fn list_extend(stack: &mut [Item], items: Vec<Value>) -> Result<(), String> {
    let Some(Item::Value(Value::Array(list))) = stack.last_mut() else {
        return Err("pickle appends to something that is not a list".into());
    };
    list.extend(items);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps({"version": "2.4", "entries": [{"a": (1, 2.5), "b": None, "c": True,
    /// "n": 2**40, "neg": -3}]}, protocol=4)`, as Python 3 writes it.
    const PROTO4: &[u8] = b"\x80\x04\x95X\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x07version\x94\x8c\x032.4\x94\x8c\x07entries\x94]\x94}\x94(\x8c\x01a\x94K\x01G@\x04\x00\x00\x00\x00\x00\x00\x86\x94\x8c\x01b\x94N\x8c\x01c\x94\x88\x8c\x01n\x94\x8a\x06\x00\x00\x00\x00\x00\x01\x8c\x03neg\x94J\xfd\xff\xff\xffuau.";

    #[test]
    fn a_protocol_4_dump_reads_as_its_values() {
        let v = read(PROTO4).unwrap();
        assert_eq!(v["version"], "2.4");
        let e = &v["entries"][0];
        assert_eq!(e["a"], serde_json::json!([1, 2.5]));
        assert_eq!(e["b"], Value::Null);
        assert_eq!(e["c"], true);
        assert_eq!(e["n"], 1u64 << 40);
        assert_eq!(e["neg"], -3);
    }

    /// `pickle.dumps({"x": [[1, 2], [3]], "s": "é"}, protocol=2)`: memo puts and marks.
    #[test]
    fn a_protocol_2_dump_reads_as_its_values() {
        let b = b"\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01]q\x02(]q\x03(K\x01K\x02e]q\x04K\x03aeX\x01\x00\x00\x00sq\x05X\x02\x00\x00\x00\xc3\xa9q\x06u.";
        assert_eq!(
            read(&b[..]).unwrap(),
            serde_json::json!({"x": [[1, 2], [3]], "s": "é"})
        );
    }

    #[test]
    fn globals_other_than_typed_lists_are_refused_not_run() {
        let evil = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R.";
        let e = read(&evil[..]).unwrap_err();
        assert!(e.contains("os.system"), "{e}");
        let typed = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n]q\x00(K\x01K\x02e\x85R.";
        assert_eq!(read(&typed[..]).unwrap(), serde_json::json!([1, 2]));
    }
}
