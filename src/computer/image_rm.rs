//! Removing yy's computer images from the local Docker engine: never one a container
//! (running or stopped) was made from, nor one a Runner is configured with.

use std::collections::{HashMap, HashSet};

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveImageOptionsBuilder};

use super::docker::Provider;
use super::image::{self, ImageRow};
use super::{ComputerError, labels};

/// Image ids that containers on this engine were made from (any state).
pub async fn used_by_containers(provider: &Provider) -> Result<HashSet<String>, ComputerError> {
    let opts = ListContainersOptionsBuilder::new().all(true).build();
    let list = provider.docker().list_containers(Some(opts)).await?;
    Ok(list.into_iter().filter_map(|c| c.image_id).collect())
}

/// The yy image named by a full id, an id prefix (with or without `sha256:`) or a tag.
pub fn find<'a>(images: &'a [ImageRow], key: &str) -> Result<&'a ImageRow, ComputerError> {
    let hex = key.strip_prefix("sha256:").unwrap_or(key);
    let found: Vec<&ImageRow> = images
        .iter()
        .filter(|i| {
            i.tags.iter().any(|t| t == key)
                || (hex.len() >= 4
                    && i.id
                        .strip_prefix("sha256:")
                        .is_some_and(|h| h.starts_with(hex)))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one),
        [] => Err(ComputerError::NotFound(format!(
            "no yy image {key:?}: see `yy image list`"
        ))),
        many => Err(ComputerError::Invalid(format!(
            "image {key:?} is ambiguous: it matches {}; give more characters",
            many.iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Removes one image (its tags too) and whatever base image no other image needs now.
pub async fn remove(provider: &Provider, id: &str) -> Result<(), ComputerError> {
    let opts = RemoveImageOptionsBuilder::new().force(true).build();
    provider.docker().remove_image(id, Some(opts), None).await?;
    Ok(())
}

/// Every image carrying yy's base label: the imported root filesystems, and the images
/// built on them (which inherit the label).
async fn bases_and_builds(
    provider: &Provider,
) -> Result<Vec<bollard::models::ImageSummary>, ComputerError> {
    let filters: HashMap<&str, Vec<String>> =
        HashMap::from([("label", vec![labels::BASE.to_string()])]);
    let opts = bollard::query_parameters::ListImagesOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    Ok(provider.docker().list_images(Some(opts)).await?)
}

/// Base images (the imported root filesystems) that no yy image is built on any more.
pub async fn unused_bases(provider: &Provider) -> Result<Vec<String>, ComputerError> {
    let list = bases_and_builds(provider).await?;
    let children: HashSet<String> = list.iter().map(|i| i.parent_id.clone()).collect();
    Ok(list
        .into_iter()
        .filter(|i| !i.labels.contains_key(labels::VERSION) && !children.contains(&i.id))
        .map(|i| i.id)
        .collect())
}

/// yy's images, newest first (what `yy image list` shows): committed by `yy image build`
/// on top of one of its base images. An image built `FROM` a yy image inherits its labels
/// but not that parent, and is not listed.
pub async fn list(provider: &Provider) -> Result<Vec<ImageRow>, ComputerError> {
    let all = bases_and_builds(provider).await?;
    let bases: HashSet<&str> = all
        .iter()
        .filter(|i| !i.labels.contains_key(labels::VERSION))
        .map(|i| i.id.as_str())
        .collect();
    // Podman writes a parent without its `sha256:`.
    let parents: HashMap<String, String> = all
        .iter()
        .map(|i| (i.id.clone(), super::engine::full_image_id(&i.parent_id)))
        .collect();
    Ok(image::list(provider)
        .await?
        .into_iter()
        .filter(|r| {
            parents
                .get(r.id.as_str())
                .is_some_and(|p| bases.contains(p.as_str()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, tag: &str) -> ImageRow {
        ImageRow {
            id: id.into(),
            created: String::new(),
            yy_version: String::new(),
            recipe: String::new(),
            binary: String::new(),
            tags: vec![tag.into()],
        }
    }

    #[test]
    fn images_are_named_by_id_prefix_or_tag() {
        let rows = [row("sha256:abcd11", "yy:a"), row("sha256:abcd22", "yy:b")];
        assert_eq!(find(&rows, "sha256:abcd1").unwrap().id, "sha256:abcd11");
        assert_eq!(find(&rows, "abcd2").unwrap().id, "sha256:abcd22");
        assert_eq!(find(&rows, "yy:b").unwrap().id, "sha256:abcd22");
        assert!(
            matches!(find(&rows, "abcd"), Err(ComputerError::Invalid(m)) if m.contains("sha256:abcd11"))
        );
        assert!(matches!(
            find(&rows, "ffff"),
            Err(ComputerError::NotFound(_))
        ));
        assert!(matches!(
            find(&rows, "abc"),
            Err(ComputerError::NotFound(_))
        ));
    }
}
