"""``rllm/Web-v0``: do a task on a web page in a real Chromium, driven through Playwright.

Each episode opens a page in a fresh browser context and gives the agent a goal. The shipped
suite has 22 task families (forms, login, search, multi-page navigation, tables, a shop cart,
a date picker, dialogs...) served by a small web app inside the package on 127.0.0.1; a task
row names a family and a seed, and every seed is a new instance, so the supply of training
tasks is unlimited. Open-ended rows name any URL, a goal and a reward function instead.

## Observation
Text: the goal and the action grammar (first observation only), then the page::

    URL: http://tasks.local/login
    Title: Log in
    Result: Clicked e7.
    Page:
    - main [ref=e1]:
      - heading "Sign in" [level=1] [ref=e2]
      - textbox "Username" [ref=e4]
      - button "Log in" [ref=e8]

``Page`` is Playwright's aria snapshot of the page (``page.aria_snapshot(mode="ai")``);
``[ref=eN]`` labels (``[ref=f1eN]`` after a page load) name the elements actions take. The task site is always shown as ``http://tasks.local`` (its real port differs
from process to process). With ``screenshot=True`` the observation is a Dict
``{"text": ..., "screenshot": uint8 array (height, width, 3)}`` of the viewport.

## Action grammar
The last call of one of these in the reply counts (backticks and prose around it are fine,
text before ``</think>`` is ignored); strings take double or single quotes::

    click(ref)   fill(ref, "text")   select(ref, "option")   press("Enter")
    scroll("down")   goto(url)   back()   answer("text")

Anything else is an invalid action: nothing happens, the observation says why and repeats the
grammar, ``info["action_valid"]`` is False and the turn counts. A valid action that fails on
the page (a ref that no longer exists, an option that is not there, a blocked address, a page
that does not respond in time) says so under ``Result:``.

## Reward
1.0 when the task's validator accepts the outcome, else 0.0. Validators check the app state
the page reported to the task server (a submitted form, a cart, a sort order...) or the
answer. An invalid action gives ``-format_penalty`` (default 0.0). Open-ended tasks score with
their reward function.

## Episode end
Terminated when the page submits the task (the final button of a form-like task) or the agent
answers with ``answer(...)``; ``info["is_correct"]`` tells the outcome. Truncated after
``max_turns`` (default 20). A crashed browser or renderer, or a browser that stops answering,
ends the episode with ``info["failure"] = "browser"`` (a broken user reward function:
``"grader"``); the next reset relaunches the browser.

## Arguments
``gym.make("rllm/Web-v0", tasks="suite", families=None, seeds=100, screenshot=False,
viewport=(800, 600), allowlist=(), max_turns=20, action_timeout=5.0, navigation_timeout=10.0,
format_penalty=0.0, browser=None, column_map=None, render_mode=None)``

* ``tasks``: ``"suite"`` (``seeds`` instances of every family in ``families``, default all),
  a JSONL/JSON/Parquet file, ``"registry:<name>"`` or a list of rows. A suite row is
  ``{"family": "login", "seed": 7}``; an open-ended row is ``{"url": ..., "goal": ...,
  "reward": "package.module:function"}`` (see ``rllm_envs.web.openended``).
  ``reset(options={"task": row})`` runs one row, any seed.
* ``allowlist``: origins (``https://example.org``) or hosts (``example.org:8080``) the
  browser may reach besides the task site (and an open-ended task's own origin). Every other
  request is aborted.
* ``browser``: a Chromium executable; by default Playwright's bundled Chromium when installed,
  else the system's ``chromium``.

One browser is shared by all the envs of a process (on a private event-loop thread, so envs
may be called from any thread) and each episode gets a fresh context, prepared ahead as a
spare; closing the last env (or the process ending, even by SIGKILL) leaves no Chromium
process.

``info`` holds ``task_id``, ``goal``, ``url`` and ``family`` at reset; ``turn``,
``action_valid``, ``action`` and ``url`` after steps; ``is_correct`` and ``answer`` at the end.

## Async
``await env.areset(...)`` / ``await env.astep(action)`` (or ``rllm_envs.core.async_env.areset`` /
``astep`` on what ``gym.make`` returned) give exactly what ``reset`` / ``step`` give, awaiting
the browser on its host loop instead of blocking a thread: one event loop drives any number of
envs (``metadata["rllm.native_async"]``). A cancelled call is cancelled in the browser too; a
context it had taken is closed.

## Solvers
``rllm_envs.web.solver`` plays any suite instance with its scripted solution through the same
action grammar (``python -m rllm_envs.web.solver``).

## Snapshots
``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``) of a suite task. A page
cannot be copied - its scripts keep state in memory (a wizard's answers), the browser numbers
element refs by the page's history, and the task app's state is on its server - so a snapshot
keeps the page actions since reset, and a restore replays them on a fresh page of the same task
(a new context and task-server session) and then checks that the page reads exactly as it did:
address, title, aria snapshot with its refs, session and local storage, and the app state the
server holds for the episode. A page that reads differently raises ``SnapshotUnsupported`` and
ends the restored episode. A restore costs the replay (docs/envs/snapshots-containers.md).
Refused with ``SnapshotUnsupported``: open-ended tasks and episodes that opened a page outside
the task app (an allowlisted site), whose server-side state rllm cannot capture and which a
replay would send the actions to again. The replay rebuilds what a capture of the page could
not (script memory, refs, the tab's history, so ``back()`` behaves as it did); what it cannot
promise is a page that depends on time or chance (timers, the clock, random numbers), which
the suite's pages do not, and the check catches it where it shows. Snapshots hold nothing
outside Python (the actions, the page's fingerprint, the last screenshot) and outlive their
env.

## Version history
* v0: first version.
* v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (same id: no change to the episodes).
* v0, async: ``areset`` / ``astep`` (same results, no version change).
"""

from rllm_envs.web.env import SITE_ALIAS, WebEnv
from rllm_envs.web.tasks import FAMILIES, suite_rows

__all__ = ["FAMILIES", "SITE_ALIAS", "WebEnv", "suite_rows"]
