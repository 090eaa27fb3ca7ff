//! The subset of Python's pickle that a Flight Recorder dump uses, read into JSON values:
//! dicts, lists, tuples, strings, bytes, ints, floats, booleans and None (protocols 2–5, as
//! `pickle.dump` and PyTorch's C++ pickler write them, including its `build_intlist`-style
//! typed lists and older builds' `restore_type_tag`). Anything else (objects, tensors, any
//! other global) is refused, not run: nothing in a file is ever executed.
//!
//! Objects are built in an arena and the memo holds references into it, as Python's does: a
//! list memoized while empty and filled later reads back filled wherever it is referred to.
//! Turning the arena into values is bounded in depth and in the values it may produce, so a
//! few hundred bytes that refer to themselves exponentially ("billion laughs") or nest
//! thousands deep are refused, not expanded.

use serde_json::{Map, Number, Value};
use std::io::Read;

/// The most a pickle may weigh here (a dump of 20,000 entries is a few MB).
const MAX_PICKLE_BYTES: u64 = 512 << 20;
/// The deepest nesting read (a dump nests five deep).
pub const MAX_DEPTH: usize = 256;
/// The most values a pickle may expand to (a 20,000-entry dump is under a million).
pub const MAX_VALUES: usize = 2_000_000;

/// An object being built.
enum Node {
    Leaf(Value),
    /// A list or a tuple: its items.
    List(Vec<usize>),
    Dict(Vec<(usize, usize)>),
}

#[derive(Clone, Copy)]
enum Item {
    Mark,
    Node(usize),
    /// A global that hands back its first argument (PyTorch's typed lists, type tags).
    ListBuilder,
}

fn take<'a>(data: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let s = data
        .get(*at..at.saturating_add(n))
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

#[derive(Default)]
struct Vm {
    nodes: Vec<Node>,
    stack: Vec<Item>,
    memo: std::collections::HashMap<u64, Item>,
}

impl Vm {
    fn push(&mut self, node: Node) {
        self.nodes.push(node);
        self.stack.push(Item::Node(self.nodes.len() - 1));
    }

    fn pop(&mut self) -> Result<usize, String> {
        match self.stack.pop() {
            Some(Item::Node(n)) => Ok(n),
            _ => Err("pickle pops an empty stack".into()),
        }
    }

    fn since_mark(&mut self) -> Result<Vec<usize>, String> {
        let mark = self
            .stack
            .iter()
            .rposition(|i| matches!(i, Item::Mark))
            .ok_or("pickle pops to a mark it never set")?;
        let items: Vec<Item> = self.stack.drain(mark..).skip(1).collect();
        items
            .into_iter()
            .map(|i| match i {
                Item::Node(n) => Ok(n),
                _ => Err("pickle holds an object ncclprobe does not read".to_string()),
            })
            .collect()
    }

    fn top_node(&mut self) -> Result<&mut Node, String> {
        match self.stack.last() {
            Some(Item::Node(n)) => Ok(&mut self.nodes[*n]),
            _ => Err("pickle adds items to nothing".into()),
        }
    }

    fn set_items(&mut self, items: Vec<usize>) -> Result<(), String> {
        let Node::Dict(pairs) = self.top_node()? else {
            return Err("pickle sets items on something that is not a dict".into());
        };
        pairs.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])));
        Ok(())
    }

    fn append(&mut self, items: Vec<usize>) -> Result<(), String> {
        let Node::List(list) = self.top_node()? else {
            return Err("pickle appends to something that is not a list".into());
        };
        list.extend(items);
        Ok(())
    }

    fn memo_index(op: u8, data: &[u8], at: &mut usize) -> Result<u64, String> {
        Ok(if matches!(op, b'q' | b'h') {
            take(data, at, 1)?[0] as u64
        } else {
            u32::from_le_bytes(take(data, at, 4)?.try_into().unwrap_or([0; 4])) as u64
        })
    }

    /// The value of node `n`, at most MAX_DEPTH deep and MAX_VALUES in all.
    fn value(&self, n: usize, depth: usize, budget: &mut usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("pickle nests deeper than {MAX_DEPTH} levels"));
        }
        if *budget == 0 {
            return Err(format!("pickle expands to more than {MAX_VALUES} values (it refers to its own objects over and over)"));
        }
        *budget -= 1;
        Ok(match &self.nodes[n] {
            Node::Leaf(v) => v.clone(),
            Node::List(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.value(*i, depth + 1, budget))
                    .collect::<Result<_, _>>()?,
            ),
            Node::Dict(pairs) => {
                let mut map = Map::new();
                for (k, v) in pairs {
                    let key = key_of(self.value(*k, depth + 1, budget)?);
                    map.insert(key, self.value(*v, depth + 1, budget)?);
                }
                Value::Object(map)
            }
        })
    }
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
    let mut vm = Vm::default();
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
            b'.' => {
                let root = vm.pop()?;
                let mut budget = MAX_VALUES;
                return vm.value(root, 0, &mut budget);
            }
            b'(' => vm.stack.push(Item::Mark),
            b'}' => vm.push(Node::Dict(Vec::new())),
            b']' | b')' | 0x8f => vm.push(Node::List(Vec::new())),
            b'N' => vm.push(Node::Leaf(Value::Null)),
            0x88 => vm.push(Node::Leaf(Value::Bool(true))),
            0x89 => vm.push(Node::Leaf(Value::Bool(false))),
            b'K' | b'M' | b'J' | 0x8a | b'G' | 0x8c | b'X' | 0x8d | b'C' | b'B' | 0x8e => {
                let v = scalar(op, &data, &mut at)?;
                vm.push(Node::Leaf(v))
            }
            0x94 => {
                let top = *vm.stack.last().ok_or("pickle memoizes an empty stack")?;
                vm.memo.insert(vm.memo.len() as u64, top);
            }
            b'q' | b'r' => {
                let idx = Vm::memo_index(op, &data, &mut at)?;
                let top = *vm.stack.last().ok_or("pickle memoizes an empty stack")?;
                vm.memo.insert(idx, top);
            }
            b'h' | b'j' => {
                let idx = Vm::memo_index(op, &data, &mut at)?;
                let item = *vm
                    .memo
                    .get(&idx)
                    .ok_or("pickle reads a memo it never wrote")?;
                vm.stack.push(item)
            }
            b's' => {
                let v = vm.pop()?;
                let k = vm.pop()?;
                vm.set_items(vec![k, v])?;
            }
            b'u' => {
                let items = vm.since_mark()?;
                vm.set_items(items)?;
            }
            b'a' => {
                let v = vm.pop()?;
                vm.append(vec![v])?;
            }
            b'e' | 0x90 => {
                let items = vm.since_mark()?;
                vm.append(items)?;
            }
            b't' | 0x91 => {
                let items = vm.since_mark()?;
                vm.push(Node::List(items))
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(vm.pop()?);
                }
                items.reverse();
                vm.push(Node::List(items))
            }
            b'c' => {
                // GLOBAL "module\nname\n": only PyTorch's list builders are accepted.
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
                vm.stack.push(global(&module, &name)?);
            }
            0x93 => {
                let name = vm.pop()?;
                let module = vm.pop()?;
                let mut budget = 4;
                let name = key_of(vm.value(name, 0, &mut budget)?);
                let module = key_of(vm.value(module, 0, &mut budget)?);
                vm.stack.push(global(&module, &name)?);
            }
            b'R' => {
                let args = vm.pop()?;
                match vm.stack.pop() {
                    Some(Item::ListBuilder) => {
                        let first = match &vm.nodes[args] {
                            Node::List(items) => items.first().copied(),
                            _ => None,
                        };
                        match first {
                            Some(n) => vm.stack.push(Item::Node(n)),
                            None => vm.push(Node::List(Vec::new())),
                        }
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

    /// `l = [1, 2]; pickle.dumps({"a": l, "b": l}, protocol=2)`: the list is memoized empty,
    /// filled, and referred to again; both keys read it filled.
    #[test]
    fn a_shared_list_reads_back_filled_wherever_it_is_referred_to() {
        let b = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02eX\x01\x00\x00\x00bq\x03h\x02u.";
        assert_eq!(
            read(&b[..]).unwrap(),
            serde_json::json!({"a": [1, 2], "b": [1, 2]})
        );
    }

    /// Each list holds the previous one twice: 40 levels would be 2^40 values.
    #[test]
    fn self_referring_growth_and_deep_nesting_are_refused() {
        let mut b = b"\x80\x02]q\x00".to_vec();
        for i in 0..40u8 {
            // [prev, prev], memoized as i + 1.
            b.extend([b'h', i, b'h', i, 0x86, b'q', i + 1]);
        }
        b.push(b'.');
        let e = read(&b[..]).unwrap_err();
        assert!(e.contains("expands to more than"), "{e}");
        let mut deep = b"\x80\x02".to_vec();
        deep.extend(std::iter::repeat_n(b']', 20_000));
        deep.extend(std::iter::repeat_n(b'a', 19_999));
        deep.push(b'.');
        let e = read(&deep[..]).unwrap_err();
        assert!(e.contains("nests deeper than"), "{e}");
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
