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
    #[error("unknown model preset '{0}'; presets: {1}")]
    UnknownPreset(String, String),
    #[error("{path}: {reason}")]
    BadFile { path: String, reason: String },
}

#[derive(Deserialize)]
struct PresetFile {
    source: String,
    num_params: u64,
    tensors: Vec<(String, u64)>,
}

const PRESETS_JSON: &str = include_str!("../../data/models.json");

fn presets() -> Vec<(String, PresetFile)> {
    // The file is ours and checked by a test; an error here is a build defect.
    let map: std::collections::BTreeMap<String, PresetFile> =
        serde_json::from_str(PRESETS_JSON).unwrap_or_default();
    map.into_iter().collect()
}

pub fn preset_names() -> Vec<String> {
    presets().into_iter().map(|(n, _)| n).collect()
}

/// A shipped preset (fp32 gradients), with the published parameter count it must add up to.
pub fn preset(name: &str) -> Result<(Model, u64), ModelError> {
    let want = name.trim().to_ascii_lowercase();
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
        .ok_or_else(|| ModelError::UnknownPreset(name.to_string(), preset_names().join(", ")))
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
    let tensors = entries
        .into_iter()
        .map(|(name, info)| Tensor {
            numel: info.shape.iter().map(|&d| d as u64).product(),
            elem_bytes: info.dtype.size() as u64,
            name,
        })
        .collect::<Vec<_>>();
    if tensors.is_empty() {
        return Err(bad("the header lists no tensors".into()));
    }
    Ok(file_model(path, tensors, "safetensors header of"))
}

/// A model read from a file: named after the file, its source saying how it was read.
fn file_model(path: &Path, tensors: Vec<Tensor>, how: &str) -> Model {
    Model {
        name: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        tensors,
        source: format!("{how} {}", path.display()),
    }
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
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let list: Vec<ListedTensor> = serde_json::from_str(&text).map_err(|e| {
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
    Ok(file_model(path, tensors, "tensor list"))
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
}
