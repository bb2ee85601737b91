"""Rule semantics that one fixture file cannot show: the project index (several files), device
inference, fix safety across torch versions, and cases whose good/bad lines would mask each
other in one file. Each snippet is taken from real training code (named in the test)."""

from __future__ import annotations

import textwrap

from pitstop.lint.parallel import LintOptions, Task, run_tasks
from pitstop.lint.index.project import build_index, scan_source
from pitstop.lint.runner import fix_source, lint_source, rules_for


def _lint(src: str, *codes: str, name: str = "train.py") -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(textwrap.dedent(src), name, rules_for(codes))]


def _project(tmp_path, files: dict[str, str], codes) -> list[tuple[str, int, str]]:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
    tasks = [Task(str(tmp_path / rel), rel, tuple(codes)) for rel in files]
    run = run_tasks(tasks, LintOptions(jobs=1))
    return sorted((f.filename, f.line, f.code) for f in run.findings)


# -- the project index -----------------------------------------------------------------------
def test_set_epoch_called_in_another_module_silences_pit703(tmp_path):
    # timm: timm/data/loader.py builds the sampler, train.py calls loader.sampler.set_epoch(epoch)
    files = {
        "timm/__init__.py": "",
        "timm/data/__init__.py": "",
        "timm/data/loader.py": """
            from torch.utils.data import DistributedSampler
            def create_loader(dataset):
                sampler = DistributedSampler(dataset)
                return sampler
        """,
        "train.py": """
            for epoch in range(10):
                loader.sampler.set_epoch(epoch)
        """,
    }
    assert _project(tmp_path, files, ["PIT703"]) == []
    alone = _project(tmp_path / "alone", {"timm/data/loader.py": files["timm/data/loader.py"]}, ["PIT703"])
    assert [c for _, _, c in alone] == ["PIT703"]


def test_two_example_folders_are_two_projects(tmp_path):
    files = {
        "mnist/main.py": "for e in range(3):\n    sampler.set_epoch(e)\n",
        "imagenet/main.py": "from torch.utils.data import DistributedSampler\nsampler = DistributedSampler(ds)\n",
    }
    assert [(f, c) for f, _, c in _project(tmp_path, files, ["PIT703"])] == [("imagenet/main.py", "PIT703")]


def test_torch_save_of_a_model_class_from_a_sibling_file(tmp_path):
    # pytorch/examples super_resolution: `from model import Net` ... torch.save(model, path)
    files = {
        "model.py": """
            import torch.nn as nn
            class Base(nn.Module):
                pass
            class Net(Base):
                pass
            class Config:
                pass
        """,
        "main.py": """
            import torch
            from model import Net, Config
            model = Net(upscale_factor=3).to(device)
            torch.save(model, "model.pth")
            config = Config()
            torch.save(config, "config.pth")
        """,
        "wlm.py": """
            import torch
            import model
            model = model.Net()
            torch.save(model, "m.pt")
        """,
    }
    assert _project(tmp_path, files, ["PIT904"]) == [("main.py", 5, "PIT904"), ("wlm.py", 5, "PIT904")]


def test_scan_finds_no_grad_methods_and_dataset_kinds():
    info = scan_source(textwrap.dedent("""
        class Pipe:
            @torch.no_grad()
            def __call__(self, prompt):
                return self.unet(prompt)
            @torch.inference_mode(False)
            def grads(self):
                pass
        class MyTrainDataset(Dataset):
            def __getitem__(self, index):
                return self.data[index]
        class Images(Dataset):
            def __getitem__(self, i):
                return self.transform(Image.open(self.paths[i]))
        class Stream(IterableDataset):
            def __iter__(self):
                return self.buffer.sample()
    """))
    assert info.no_grad_functions == {"__call__"}
    assert info.in_memory == {"MyTrainDataset"}
    assert info.unsharded_iterable == {"Stream"}
    assert {"MyTrainDataset", "Images", "Stream"} <= info.datasets


def test_in_memory_dataset_from_a_sibling_file_is_not_a_training_loader(tmp_path):
    # pytorch/examples ddp-tutorial-series: MyTrainDataset (datautils.py) holds random tensors
    files = {
        "datautils.py": """
            class MyTrainDataset(Dataset):
                def __getitem__(self, index):
                    return self.data[index]
        """,
        "multigpu.py": """
            from torch.utils.data import DataLoader
            from datautils import MyTrainDataset
            def prepare_dataloader(dataset, batch_size):
                return DataLoader(dataset, batch_size=batch_size, shuffle=False)
            def load_train_objs():
                return MyTrainDataset(2048)
            loader = DataLoader(MyTrainDataset(10), batch_size=2)
        """,
    }
    assert _project(tmp_path, files, ["PIT101"]) == []


def test_index_is_built_once_and_cached(tmp_path):
    p = tmp_path / "a.py"
    p.write_text("x.set_epoch(1)\n", encoding="utf-8")
    first = build_index([str(p)])
    assert first.calls_method(str(p), "set_epoch")
    assert build_index([str(p)]).modules[str(p)] is first.modules[str(p)]  # same size+mtime: cached


# -- device inference -------------------------------------------------------------------------
def test_torch_accelerator_device_selection_implies_an_accelerator():
    # pytorch/examples mnist/main.py (no "cuda" anywhere)
    src = """
        import torch
        from torch.utils.data import DataLoader
        device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
        train_loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=1)
        for data, target in train_loader:
            data, target = data.to(device), target.to(device)
            loss = model(data).sum()
            loss.backward()
    """
    assert _lint(src, "PIT102", "PIT103") == [(5, "PIT102"), (7, "PIT103"), (7, "PIT103")]
    assert _lint(src.replace("torch.accelerator.current_accelerator() if torch.accelerator.is_available() else ", ""),
                 "PIT102", "PIT103") == []


def test_pit103_skips_evaluation_copies():
    src = """
        device = "cuda"
        def test(model, device, test_loader):
            for data, target in test_loader:
                data, target = data.to(device), target.to(device)
    """
    assert _lint(src, "PIT103") == []


# -- PIT306 cases that would mask each other in one file ----------------------------------------
def test_pit306_inference_only_autocast():
    src = """
        import torch
        @torch.no_grad()
        def evaluate(model, loader):
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                return [model(x) for x in loader]
        def train(model, loader):
            for x in loader:
                model(x).sum().backward()
    """
    assert _lint(src, "PIT306") == []
    assert _lint(src.replace("model(x).sum().backward()", "with torch.autocast('cuda', dtype=torch.float16):\n"
                             "                    loss = model(x).sum()\n                loss.backward()"),
                 "PIT306") == [(9, "PIT306")]


def test_pit306_framework_or_optimizer_owns_the_scaler():
    base = """
        import torch
        def train(model, loader, {owner}):
            for batch in loader:
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    loss = model(**batch).loss
                {backward}
    """
    assert _lint(base.format(owner="x", backward="loss.backward()"), "PIT306") == [(5, "PIT306")]
    assert _lint(base.format(owner="accelerator", backward="accelerator.backward(loss)"), "PIT306") == []
    assert _lint(base.format(owner="optimizer", backward="optimizer.backward(loss)"), "PIT306") == []


# -- fix safety --------------------------------------------------------------------------------
def test_pit302_fix_is_unsafe_unless_the_file_already_uses_torch_amp():
    src = "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=True)\n"
    [f] = lint_source(src, "t.py", rules_for(["PIT302"]))
    assert f.fix.applicability == "unsafe"
    assert fix_source(src, "t.py", rules_for(["PIT302"]))[0] == src  # --fix alone changes nothing
    proven = src + "other = torch.amp.GradScaler('cuda')\n"
    [f] = lint_source(proven, "t.py", rules_for(["PIT302"]))
    assert f.fix.applicability == "safe"


def test_pit302_old_torch_fallbacks_are_left_alone():
    src = """
        import torch
        try:
            scaler = torch.amp.GradScaler(device=device)
        except (AttributeError, TypeError):
            scaler = torch.cuda.amp.GradScaler()
        scaler = torch.amp.GradScaler(device=device) if _HAS_TORCH_AMP else torch.cuda.amp.GradScaler()
        try:
            from torch.amp import GradScaler
        except ImportError:
            from torch.cuda.amp import GradScaler
    """
    assert _lint(src, "PIT302") == []
    text = textwrap.dedent(src)
    assert fix_source(text, "t.py", rules_for(["PIT302"]), unsafe=True)[0] == text


def test_pit403_fix_never_offered_where_grads_are_updated_in_place():
    # pytorch/examples distributed/rpc/batch/parameter_server.py
    src = """
        for p, g in zip(model.parameters(), grads):
            p.grad += g
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    """
    assert _lint(src, "PIT403") == []
    assert _lint(src.replace("p.grad += g", "pass"), "PIT403") == [(5, "PIT403")]
    for inplace in ("p.grad.copy_(g)", "p.grad.data.clamp_(-1, 1)", "grad.add_(g)"):
        assert _lint(src.replace("p.grad += g", inplace), "PIT403") == [], inplace


# -- framework awareness -----------------------------------------------------------------------
def test_fabric_and_accelerator_backward_count_as_backward_calls():
    src = """
        def train(fabric, model, loader, optimizer):
            for i, batch in enumerate(loader):
                loss = model(batch)
                total = total + loss
                fabric.backward(loss)
                optimizer.step()
    """
    assert _lint(src, "PIT202") == [(5, "PIT202")]


def test_lightning_hooks_are_not_evaluation_functions_to_fix():
    src = """
        import lightning as L
        class Lit(L.LightningModule):
            def validation_step(self, batch, batch_idx):
                return self.model(batch)
        def validate(model, loader):
            return [model(batch) for batch in loader]
        for epoch in range(3):
            validate(model, loader)
    """
    assert _lint(src, "PIT605", "PIT803") == [(6, "PIT605")]


def test_pit902_settings_in_the_two_branches_of_one_if():
    # torchtune/training/seed.py
    src = """
        import torch
        def set_seed(deterministic_debug_mode):
            if deterministic_debug_mode == 0:
                torch.backends.cudnn.deterministic = False
                torch.backends.cudnn.benchmark = True
            else:
                torch.backends.cudnn.deterministic = True
                torch.backends.cudnn.benchmark = False
    """
    assert _lint(src, "PIT902") == []
    assert _lint(src.replace("deterministic = False", "deterministic = True"), "PIT902") == [(6, "PIT902")]


def test_pit201_needs_an_accelerator():
    # pytorch/examples regression/main.py: CPU only, .item() waits for nothing
    src = """
        for batch_idx in count(1):
            output = F.smooth_l1_loss(fc(batch_x), batch_y)
            loss = output.item()
            output.backward()
    """
    assert _lint(src, "PIT201") == []
    assert _lint('device = "cuda"\n' + textwrap.dedent(src), "PIT201") == [(5, "PIT201")]


def test_framework_step_methods_are_per_step_code():
    src = """
        import torch, lightning as L
        from transformers import Trainer
        class Lit(L.LightningModule):
            def training_step(self, batch, batch_idx):
                loss = self.model(batch).loss
                self.log("loss", loss.item())
                if batch_idx % 100 == 0:
                    print(loss.item())
                return loss
            def on_train_epoch_end(self):
                print(self.total.item())
        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                loss = model(**inputs).loss
                torch.cuda.empty_cache()
                return loss
    """
    assert _lint(src, "PIT201", "PIT203") == [(7, "PIT201"), (16, "PIT203")]


def test_pit306_own_trainer_class_is_no_framework():
    # minGPT-style: a project's own Trainer class does not scale the loss
    src = """
        import torch
        from accelerate import Accelerator
        trainer = Trainer(config)
        def train(model, loader):
            for x in loader:
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    loss = model(x).sum()
                loss.backward()
    """
    assert _lint(src, "PIT306") == [(7, "PIT306")]
    assert _lint(src.replace("trainer = Trainer(config)", "acc = Accelerator(mixed_precision='fp16')"), "PIT306") == []


def test_pit201_not_for_what_is_shipped_over_rpc():
    # pytorch/examples distributed/rpc/batch/parameter_server.py
    src = """
        import torch.distributed.rpc as rpc
        def run_trainer(ps_rref, train_loader, m, device):
            for inputs, labels in train_loader:
                m(inputs).sum().backward()
                m = rpc.rpc_sync(ps_rref.owner(), update_and_fetch_model,
                                 args=(ps_rref, [p.grad for p in m.cpu().parameters()]))
                print(m.loss.item())
    """
    assert _lint(src, "PIT201") == [(8, "PIT201")]


def test_load_rules_silent_in_unit_tests():
    src = "import torch\ndevice = 'cuda'\nstate = torch.load(path, weights_only=False)\n"
    assert _lint(src, "PIT404", "PIT903") == [(3, "PIT404"), (3, "PIT903")]
    assert _lint(src, "PIT404", "PIT903", name="tests/test_checkpoint.py") == []
