"""``pitstop recipe FILE``: check a recipe file (JSON or TOML) and print it in full, or
(``--for FRAMEWORK``) as a training framework's options (:mod:`pitstop.engine.export`)."""

from __future__ import annotations

import argparse
import json

from pitstop.cli import EXIT_OK, CliError, Command


class RecipeCommand(Command):
    name = "recipe"
    help = "Check a training recipe file (.json/.toml) for the engine and print every field."
    order = 40

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", nargs="?", help="recipe file; without it, print the default recipe")
        parser.add_argument("--format", choices=("text", "json", "toml"), default="text")
        parser.add_argument("--for", dest="framework", choices=("lightning", "fabric", "transformers", "accelerate"),
                            help="print the recipe as that framework's options (Trainer / Fabric / "
                                 "TrainingArguments / Accelerator kwargs) instead")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.engine.recipe import Recipe, RecipeError  # torch-free

        try:
            recipe = Recipe.load(args.file) if args.file else Recipe()
        except RecipeError as exc:
            raise CliError(str(exc)) from None
        if args.framework:
            from pitstop.engine.export import export

            cfg = export(recipe, args.framework)
            if args.format == "json":
                print(json.dumps(cfg.to_dict(), indent=2))
            else:
                print(cfg.snippet(), end="")
        elif args.format == "json":
            print(json.dumps(recipe.to_dict(), indent=2))
        elif args.format == "toml":
            print(recipe.to_toml(), end="")
        else:
            changed = recipe.changed()
            width = max(len(k) for k in recipe.to_dict())
            for key, value in recipe.to_dict().items():
                mark = "*" if key in changed else " "
                print(f"{mark} {key:<{width}}  {value!r}")
            print(f"({len(changed)} field(s) differ from the defaults, marked *)")
        return EXIT_OK
