//! Model inventories for the simulator: shipped presets, a safetensors header, or a JSON list.
//! Tensors are kept in registration order (the order DDP walks parameters).

use serde::Deserialize;
use std::io::Read;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub numel: u64,
    /// Bytes per gradient element.
    pub elem_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub tensors: Vec<Tensor>,
    /// Where the inventory came from, for the report.
    pub source: String,
}

impl Model {
    pub fn num_params(&self) -> u64 {
        self.tensors.iter().map(|t| t.numel).sum()
    }
    pub fn grad_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.numel * t.elem_bytes).sum()
    }
    /// Re-type every gradient (e.g. `--grad-dtype bf16` for a bf16 model).
    pub fn with_elem_bytes(mut self, elem_bytes: u64) -> Model {
        for t in &mut self.tensors {
            t.elem_bytes = elem_bytes;
        }
        self
    }
}

#[derive(Debug, Error)]
pub enum ModelError {
    /// The name, the presets, and a hint (a near name, or the planner's shape of that name).
    #[error("unknown model preset '{0}'{2}; presets: {1}")]
    UnknownPreset(String, String, String),
    #[error("{path}: {reason}")]
    BadFile { path: String, reason: String },
    #[error(transparent)]
    Input(#[from] crate::import::text::InputError),
}

#[derive(Deserialize)]
struct PresetFile {
    source: String,
    num_params: u64,
    tensors: Vec<(String, u64)>,
}

const PRESETS_JSON: &str = include_str!("../../../../data/models.json");

fn presets() -> Vec<(String, PresetFile)> {
    // The file is ours and checked by a test; an error here is a build defect.
    let map: std::collections::BTreeMap<String, PresetFile> =
        serde_json::from_str(PRESETS_JSON).unwrap_or_default();
    map.into_iter().collect()
}

/// Every model name `simulate ddp`, `fsdp` and `memory` take, sorted: the tensor inventories
/// shipped (data/models.json) and the memory planner's transformer shapes, whose tensors come
/// from the shape. One list, so a name one command takes the others take too.
pub fn preset_names() -> Vec<String> {
    let mut names: Vec<String> = presets().into_iter().map(|(n, _)| n).collect();
    names.extend(
        crate::analysis::memory::presets::preset_names()
            .into_iter()
            .map(String::from),
    );
    names.sort();
    names.dedup();
    names
}

/// A shipped preset (fp32 gradients), with the published parameter count it must add up to:
/// a shipped inventory, else the tensors of the memory planner's shape of that name.
pub fn preset(name: &str) -> Result<(Model, u64), ModelError> {
    let want = name.trim().to_ascii_lowercase();
    if let Some(model) = from_shape(&want) {
        return Ok(model);
    }
    presets()
        .into_iter()
        .find(|(n, _)| *n == want)
        .map(|(n, p)| {
            let tensors = p
                .tensors
                .into_iter()
                .map(|(name, numel)| Tensor {
                    name,
                    numel,
                    elem_bytes: 4,
                })
                .collect();
            (
                Model {
                    name: n,
                    tensors,
                    source: p.source,
                },
                p.num_params,
            )
        })
        .ok_or_else(|| {
            let names = preset_names();
            let listed: Vec<&str> = names.iter().map(String::as_str).collect();
            let hint = crate::flags::did_you_mean(name, &listed);
            ModelError::UnknownPreset(name.to_string(), names.join(", "), hint)
        })
}

/// A memory-planner shape with no shipped inventory of its own, as an inventory: its tensors
/// in Hugging Face registration order, fp32 gradients, and its published count.
fn from_shape(name: &str) -> Option<(Model, u64)> {
    if presets().iter().any(|(n, _)| n == name) {
        return None;
    }
    let shape = crate::analysis::memory::presets::preset(name).ok()?;
    let published = crate::analysis::memory::presets::PRESETS
        .iter()
        .find(|p| p.0 == name)
        .map(|p| p.2)?;
    let tensors = shape
        .tensors()
        .into_iter()
        .map(|(name, numel)| Tensor {
            name,
            numel,
            elem_bytes: 4,
        })
        .collect();
    Some((
        Model {
            name: name.to_string(),
            tensors,
            source: format!(
                "{}, tensors in Hugging Face registration order",
                shape.source
            ),
        },
        published,
    ))
}

fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype.to_ascii_lowercase().as_str() {
        "f64" | "float64" | "double" | "i64" | "int64" | "u64" => 8,
        "f32" | "float32" | "float" | "fp32" | "i32" | "int32" | "u32" | "tf32" => 4,
        "f16" | "float16" | "half" | "fp16" | "bf16" | "bfloat16" | "i16" | "u16" => 2,
        "i8" | "u8" | "int8" | "uint8" | "bool" | "f8_e4m3" | "f8_e5m2" | "fp8" => 1,
        _ => return None,
    })
}

/// A safetensors file: only the header is read (8-byte length, then JSON). Tensors come in
/// data-offset order, the closest the file keeps to registration order.
pub fn from_safetensors(path: &Path) -> Result<Model, ModelError> {
    let bad = |reason: String| ModelError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let mut file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(bad("not a regular file".into()));
    }
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| bad("too short for a safetensors header".into()))?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return Err(bad(format!(
            "header length {len} bytes is not plausible: not a safetensors file?"
        )));
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header)
        .map_err(|_| bad("truncated safetensors header".into()))?;
    let meta: safetensors::tensor::Metadata = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("not a safetensors header: {e}")))?;
    let mut entries: Vec<(String, &safetensors::tensor::TensorInfo)> =
        meta.tensors().into_iter().collect();
    entries.sort_by_key(|(_, info)| info.data_offsets);
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, info) in entries {
        let numel = info
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .ok_or_else(|| {
                bad(format!(
                    "tensor {name}: shape {:?} has more elements than 64 bits can count",
                    info.shape
                ))
            })?;
        tensors.push(Tensor {
            numel,
            elem_bytes: info.dtype.size() as u64,
            name,
        });
    }
    if tensors.is_empty() {
        return Err(bad("the header lists no tensors".into()));
    }
    file_model(path, tensors, "safetensors header of")
}

/// The widest element any gradient may be re-typed to (fp64): sizes are checked against it,
/// so no later product of a count and an element size can overflow.
const WIDEST_ELEMENT_BYTES: u64 = 8;

/// The first tensor whose bytes (at the widest element), or the running total of them, do not
/// fit in 64 bits.
fn overflowing_tensor(tensors: &[Tensor]) -> Option<&Tensor> {
    let mut total = 0u64;
    tensors.iter().find(|t| {
        match t
            .numel
            .checked_mul(WIDEST_ELEMENT_BYTES)
            .and_then(|bytes| total.checked_add(bytes))
        {
            Some(sum) => {
                total = sum;
                false
            }
            None => true,
        }
    })
}

/// A model read from a file: named after the file, its source saying how it was read; refused
/// when its sizes do not fit in 64 bits (naming the tensor where they stop fitting).
fn file_model(path: &Path, tensors: Vec<Tensor>, how: &str) -> Result<Model, ModelError> {
    if let Some(t) = overflowing_tensor(&tensors) {
        return Err(ModelError::BadFile {
            path: path.display().to_string(),
            reason: format!(
                "tensor {}: {} elements; the model's size in bytes no longer fits in 64 bits there",
                t.name, t.numel
            ),
        });
    }
    Ok(Model {
        name: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        tensors,
        source: format!("{how} {}", path.display()),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListedTensor {
    name: String,
    numel: u64,
    #[serde(default)]
    dtype: Option<String>,
}

/// A JSON list of `{name, numel, dtype}` in registration order.
pub fn from_json_list(path: &Path) -> Result<Model, ModelError> {
    let bad = |reason: String| ModelError::BadFile {
        path: path.display().to_string(),
        reason,
    };
    let bytes = crate::import::text::Input::open(path)?.bytes("a JSON list of tensors")?;
    let list: Vec<ListedTensor> = serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!(
            "expected a JSON list of {{\"name\", \"numel\", \"dtype\"}}: {e}"
        ))
    })?;
    if list.is_empty() {
        return Err(bad("the list is empty".into()));
    }
    let mut tensors = Vec::with_capacity(list.len());
    for t in list {
        let elem_bytes = match &t.dtype {
            None => 4,
            Some(d) => dtype_bytes(d)
                .ok_or_else(|| bad(format!("tensor {}: unknown dtype '{d}'", t.name)))?,
        };
        tensors.push(Tensor {
            name: t.name,
            numel: t.numel,
            elem_bytes,
        });
    }
    file_model(path, tensors, "tensor list")
}

/// `--model`: a preset name, a `.safetensors` file, or a `.json` tensor list.
pub fn load(spec: &str) -> Result<Model, ModelError> {
    let path = Path::new(spec);
    if path.is_file() {
        return if spec.ends_with(".safetensors") {
            from_safetensors(path)
        } else {
            from_json_list(path)
        };
    }
    preset(spec).map(|(m, _)| m)
}

/// What a simulation document says of the model it ran on.
pub fn summary(model: &Model) -> crate::documents::ModelSummary {
    crate::documents::ModelSummary {
        name: model.name.clone(),
        source: model.source.clone(),
        params: model.num_params(),
        grad_bytes: model.grad_bytes(),
        tensors: model.tensors.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_adds_up_to_its_published_count() {
        // Published counts (reference/ddp.md §5.1): torchvision metadata, HF, keras-hub.
        let published = [
            ("resnet18", 11_689_512u64, 62usize),
            ("resnet50", 25_557_032, 161),
            ("vit-b16", 86_567_656, 152),
            ("bert-base", 109_482_240, 199),
            ("bert-large", 335_141_888, 391),
            ("gpt2", 124_439_808, 148),
            ("gpt2-medium", 354_823_168, 292),
            ("llama2-7b", 6_738_415_616, 291),
            // The memory planner's shapes, their tensors built from the shape: as many as the
            // Hugging Face checkpoints hold (gpt2-xl's fused c_attn is listed as q, k and v).
            ("gpt2-xl", 1_557_611_200, 2 + 48 * 16 + 2),
            ("qwen2-1.5b", 1_543_714_304, 338),
            ("gemma-2b", 2_506_172_416, 164),
            ("phi-2", 2_779_683_840, 453),
        ];
        assert_eq!(preset_names().len(), published.len());
        for (name, params, tensors) in published {
            let (model, declared) = preset(name).unwrap();
            assert_eq!(model.num_params(), params, "{name}");
            assert_eq!(declared, params, "{name}");
            assert_eq!(model.tensors.len(), tensors, "{name}");
        }
    }

    #[test]
    fn unknown_preset_lists_the_real_ones() {
        let err = preset("gpt5").unwrap_err().to_string();
        assert!(
            err.contains("bert-base") && err.contains("llama2-7b"),
            "{err}"
        );
    }

    #[test]
    fn reads_a_safetensors_header_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.safetensors");
        let header = br#"{"__metadata__":{"format":"pt"},"b.weight":{"dtype":"BF16","shape":[4,2],"data_offsets":[24,40]},"a.bias":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0u8; 40]);
        std::fs::write(&path, bytes).unwrap();
        let model = load(path.to_str().unwrap()).unwrap();
        assert_eq!(
            model.tensors[0],
            Tensor {
                name: "a.bias".into(),
                numel: 6,
                elem_bytes: 4
            }
        );
        assert_eq!(
            model.tensors[1],
            Tensor {
                name: "b.weight".into(),
                numel: 8,
                elem_bytes: 2
            }
        );
        std::fs::write(&path, b"not a safetensors file at all").unwrap();
        assert!(load(path.to_str().unwrap()).is_err());
    }

    #[test]
    fn reads_a_json_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(
            &path,
            r#"[{"name":"w","numel":10,"dtype":"bf16"},{"name":"b","numel":2}]"#,
        )
        .unwrap();
        let model = load(path.to_str().unwrap()).unwrap();
        assert_eq!(model.grad_bytes(), 10 * 2 + 2 * 4);
        std::fs::write(&path, r#"[{"name":"w","numel":10,"dtype":"complex"}]"#).unwrap();
        assert!(load(path.to_str().unwrap())
            .unwrap_err()
            .to_string()
            .contains("unknown dtype 'complex'"));
    }

    #[test]
    fn sizes_that_overflow_64_bits_are_refused_naming_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let write_st = |name: &str, shape: &str| {
            let path = dir.path().join(name);
            let header =
                format!(r#"{{"w":{{"dtype":"F32","shape":{shape},"data_offsets":[0,4]}}}}"#);
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend_from_slice(&[0u8; 4]);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        // 2^33 x (2^31 + 1) wrapped to 2^33 before; 2^40 cubed wrapped to 0.
        for shape in [
            "[8589934592,2147483649]",
            "[1099511627776,1099511627776,1099511627776]",
        ] {
            let p = write_st("big.safetensors", shape);
            let e = load(p.to_str().unwrap()).unwrap_err().to_string();
            assert!(e.contains("tensor w") && e.contains("64 bits"), "{e}");
        }
        // Four tensors of 2^62 elements: each fits, their bytes do not.
        let list = dir.path().join("list.json");
        let t = |n: &str| format!(r#"{{"name":"{n}","numel":4611686018427387904}}"#);
        std::fs::write(
            &list,
            format!("[{},{},{},{}]", t("a"), t("b"), t("c"), t("d")),
        )
        .unwrap();
        let e = load(list.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("tensor a"), "{e}");
        // A file that is not regular (a directory, a device) is refused, not read.
        assert!(load("/dev/zero").is_err());
    }
}
