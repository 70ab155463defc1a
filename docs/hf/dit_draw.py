# Draws one of each digit with diffusers from a pipeline `cargo run --example dit` saved, with the
# same Euler flow sampler and guidance as nervus (t from 1 to 0, timestep = 1000 t, null label 10):
#   python docs/hf/dit_draw.py out/dit/model digits.png
import sys, torch
from diffusers import DiTTransformer2DModel
from PIL import Image
d = sys.argv[1]
m = DiTTransformer2DModel.from_pretrained(f"{d}/transformer").eval()
torch.manual_seed(0)
n, steps, g = 10, 20, 2.0
x = torch.randn(n, 1, 28, 28)
labels = torch.arange(n)
null = torch.full((n,), 10)
with torch.no_grad():
    for i in range(steps):
        t = 1.0 - i / steps
        ts = torch.full((n,), t * 1000.0)
        vc = m(x, timestep=ts, class_labels=labels).sample
        vu = m(x, timestep=ts, class_labels=null).sample
        x = x - (vu + g * (vc - vu)) / steps
img = ((x.clamp(-1, 1) + 1) * 127.5).to(torch.uint8)[:, 0]
row = torch.cat(list(img), dim=1).numpy()
Image.fromarray(row).resize((row.shape[1] * 3, row.shape[0] * 3), Image.NEAREST).save(sys.argv[2])
print("drew", n, "digits")
