# Copyright The Lightning AI team.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
from lightning.pytorch.loops.loop import _Loop  # noqa: F401 isort: skip (avoids circular imports)
from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop  # noqa: F401
from lightning.pytorch.loops.fit_loop import _FitLoop  # noqa: F401
from lightning.pytorch.loops.optimization import _AutomaticOptimization, _ManualOptimization  # noqa: F401
from lightning.pytorch.loops.prediction_loop import _PredictionLoop  # noqa: F401
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop  # noqa: F401
