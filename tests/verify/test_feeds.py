import numpy as np
import pytest
from PIL import Image

from vitexport.core.errors import UsageError
from vitexport.verify.feeds import chunks, label_of, load_images, preprocess, random_pixels, verification_batches

IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def test_random_pixels_are_seeded_and_normalised():
    a = random_pixels((2, 3, 8, 8), 1, IMAGENET["mean"], IMAGENET["std"])
    assert np.array_equal(a, random_pixels((2, 3, 8, 8), 1, IMAGENET["mean"], IMAGENET["std"]))
    assert not np.array_equal(a, random_pixels((2, 3, 8, 8), 2, IMAGENET["mean"], IMAGENET["std"]))
    assert a.dtype == np.float32 and a.min() < -1.5 and a.max() > 2.0  # [0, 1] pixels after (x - mean) / std


def test_batch_sweep():
    assert verification_batches((1, 3, 8, 8), True, 8) == [1, 3, 8]
    assert verification_batches((4, 3, 8, 8), False, 8) == [4]


def test_preprocess_resizes_shorter_side_crops_centre_and_normalises(tmp_path):
    pixels = np.zeros((40, 80, 3), np.uint8)
    pixels[:, 10:70] = (255, 0, 0)  # a red band wider than the centre crop, in a wide image
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    x = preprocess(tmp_path / "wide.png", {"mean": [0.5] * 3, "std": [0.5] * 3}, (1, 3, 20, 20))
    assert x.shape == (3, 20, 20)
    # The 80x40 image becomes 40x20, the centre 20x20 crop is all red: R = (1-0.5)/0.5, G = B = -1.
    assert np.allclose(x[0], 1.0, atol=1e-6) and np.allclose(x[1:], -1.0, atol=1e-6)


def test_grayscale_images_for_one_channel_models(tmp_path):
    Image.fromarray(np.full((8, 8), 255, np.uint8)).save(tmp_path / "7_a.png")
    x = preprocess(tmp_path / "7_a.png", {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))
    assert x.shape == (1, 8, 8) and np.allclose(x, 1.0)


def test_labels_come_from_numeric_prefixes(tmp_path):
    from pathlib import Path

    assert label_of(Path("3_0017.png")) == 3 and label_of(Path("cat.jpg")) is None
    for name in ("1_a.png", "0_b.png"):
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / name)
    x, labels, names = load_images(tmp_path, {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))
    assert x.shape == (2, 1, 8, 8) and labels == [0, 1] and names == ["0_b.png", "1_a.png"]
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "unlabelled.png")
    assert load_images(tmp_path, {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))[1] is None


def test_chunks_pad_the_last_batch():
    x = np.arange(5).reshape(5, 1)
    parts = chunks(x, 2)
    assert [real for _, real in parts] == [2, 2, 1]
    assert parts[-1][0].ravel().tolist() == [4, 4]


@pytest.mark.parametrize("setup,message", [("missing", "not a directory"), ("empty", "no images"),
                                           ("corrupt", "cannot read broken.png")])
def test_bad_image_folders(tmp_path, setup, message):
    folder = tmp_path / "imgs"
    if setup != "missing":
        folder.mkdir()
    if setup == "corrupt":
        (folder / "broken.png").write_bytes(b"not a png")
    with pytest.raises(UsageError, match=message):
        load_images(folder, IMAGENET, (1, 3, 8, 8))


def test_an_image_over_the_decompression_bomb_limit_is_refused_not_decoded(tmp_path, monkeypatch, recwarn):
    """Between Pillow's bomb limit and twice it, Pillow only warns at Image.open: that warning is
    refused too (the limit is lowered here so that a 40x40 image stands for a huge one)."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(folder / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 1,600 pixels: over the limit, under twice it
    with pytest.raises(UsageError, match="cannot read big.png.*decompression bomb"):
        load_images(folder, IMAGENET, (1, 3, 8, 8))
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]


def test_images_are_refused_for_a_model_of_other_channels(tmp_path):
    """ViTMatte takes an image and its trimap (4 channels): a photo alone is bad input, never a crash."""
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    with pytest.raises(UsageError, match="the model takes 4 channels and an image gives 3"):
        load_images(tmp_path, {"mean": [0.5] * 4, "std": [0.5] * 4}, (1, 4, 8, 8))
