// The import wizard: a source (a catalog benchmark, a registered recipe, an uploaded file or a
// Hugging Face dataset) -> a preview of its rows and fields -> the mapping, adjusted -> a
// preview of the cases -> the import, with its progress, landing on the new version.
//
// Catalog, recipe and Hugging Face imports run through `POST /benchmarks/import`. A file is
// previewed from its first part (sent inline as the source's `text`), then uploaded through
// `POST /uploads` and imported by the worker; the page follows the job (`GET /jobs/{id}`).

import { followJob, get, paths, post, upload } from "../api.js";
import { field, fmtBytes, fmtInt, h, replace, uid } from "../dom.js";
import { jsonBlock } from "../highlight.js";
import { errorBox, navigate } from "../app.js";

const PREVIEW_BYTES = 256 * 1024;
const MAPPING_FIELDS = [
  ["id_field", "Case id from"],
  ["task_field", "inputs.user from"],
  ["answer_field", "Ground truth from"],
];
const CATEGORIES = ["qa", "coding", "browser", "tool", "agent"];

function formatOf(name) {
  const n = name.toLowerCase();
  if (n.endsWith(".csv")) return "csv";
  if (n.endsWith(".parquet")) return "parquet";
  return "jsonl";
}

// The first part of a text file, cut at its last full line.
async function head(file) {
  const text = await file.slice(0, PREVIEW_BYTES).text();
  if (file.size <= PREVIEW_BYTES) return text;
  const cut = text.lastIndexOf("\n");
  return cut > 0 ? text.slice(0, cut + 1) : text;
}

// The name the upload route takes: [A-Za-z0-9][A-Za-z0-9._-]{0,127}, the extension kept.
function uploadName(name) {
  const clean = name.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[^A-Za-z0-9]+/, "f");
  return clean.length <= 128 ? clean : clean.slice(0, 8) + clean.slice(-120);
}

function safeId(name) {
  const base = name.replace(/\.[^.]+$/, "").toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^[^a-z0-9]+/, "");
  return base.slice(0, 60) || "imported";
}

const GUESSES = {
  id_field: ["id", "qid", "task_id", "uid", "question_id", "problem_id"],
  task_field: ["question", "prompt", "input", "query", "problem", "task", "instruction", "text"],
  answer_field: ["answer", "ground_truth", "target", "output", "solution", "label", "expected"],
};

// A new mapping's first guess, from the fields the preview found; the user adjusts it.
function guessMapping(fields, mapping) {
  const m = { ...mapping };
  const lower = new Map(fields.map((f) => [f.toLowerCase(), f]));
  for (const [key, names] of Object.entries(GUESSES)) {
    if (m[key] && fields.includes(m[key])) continue;
    const hit = names.map((n) => lower.get(n)).find(Boolean);
    if (hit) m[key] = hit;
    else if (key !== "task_field") delete m[key];
  }
  if (!fields.includes(m.task_field) && fields.length) m.task_field = fields.find((f) => f !== m.id_field) || fields[0];
  return m;
}

function steps(current) {
  const names = ["Source", "Preview", "Mapping", "Import"];
  return h("ol", { class: "steps", "aria-label": "Steps" }, names.map((n, i) => h("li", { "aria-current": i === current ? "step" : null }, `${i + 1}. ${n}`)));
}

export async function importRoute(ctx) {
  ctx.title("Import");
  const state = {
    kind: "catalog", // catalog | recipe | file | hf
    recipeRef: null, // a recipe id for catalog and registered recipes
    recipe: null, // the recipe document (fetched, or built for a file / HF dataset)
    source: null, // a source override
    file: null,
    preview: null,
    mappingEdited: false,
  };
  const [benchmarks, own, shared] = await Promise.all([
    get("/benchmarks").catch(() => ({ items: [] })),
    get("/recipes", { limit: 200 }).catch(() => ({ items: [] })),
    get("/recipes", { limit: 200, shared: true }).catch(() => ({ items: [] })),
  ]);
  if (!ctx.alive()) return;
  const recipes = [...own.items, ...shared.items];

  const stepsEl = h("div");
  const body = h("div");
  const messages = h("div", { "aria-live": "polite" });

  function show(step, ...content) {
    replace(stepsEl, steps(step));
    replace(messages);
    replace(body, content);
    const heading = body.querySelector("h2");
    if (heading) {
      heading.setAttribute("tabindex", "-1");
      heading.focus();
    }
  }

  function fail(err) {
    replace(messages, errorBox(err));
  }

  // -- step 1: the source ----------------------------------------------------------------
  function sourceStep() {
    const name = uid("kind");
    const kinds = [
      ["catalog", "A catalog benchmark"],
      ["recipe", "A registered recipe"],
      ["file", "A file from this computer (jsonl, csv, parquet)"],
      ["hf", "A Hugging Face dataset"],
    ];
    const detail = h("div");
    const radios = h("fieldset", null, h("legend", null, "Import from"),
      kinds.map(([value, label]) => {
        const input = h("input", { type: "radio", name, value, id: `${name}-${value}`, checked: state.kind === value });
        input.addEventListener("change", () => { state.kind = value; drawDetail(); });
        return h("div", null, input, " ", h("label", { for: input.id }, label));
      }));

    const benchSel = h("select", null, benchmarks.items.map((b) => h("option", { value: b.id }, `${b.id} — ${b.description.slice(0, 80)}`)));
    const recipeSel = h("select", null, recipes.map((r) => h("option", { value: r.id }, `${r.id}${r.owner === "_shared" ? " (_shared)" : ""} — ${(r.description || "").slice(0, 80)}`)));
    const fileInput = h("input", { type: "file", accept: ".jsonl,.json,.ndjson,.csv,.parquet" });
    const fileRecipe = h("select", null, h("option", { value: "" }, "a new mapping (set in the next steps)"), [...benchmarks.items.map((b) => b.id), ...recipes.map((r) => r.id)].map((r) => h("option", { value: r }, `the recipe ${r}`)));
    const category = h("select", null, CATEGORIES.map((c) => h("option", { value: c }, c)));
    const hfQuery = h("input", { type: "search", placeholder: "e.g. gsm8k" });
    const hfResults = h("select", null);
    const hfSplit = h("select", null);
    const hfFound = h("div", { "aria-live": "polite" });
    hfResults.addEventListener("change", () => loadSplits());

    async function loadSplits() {
      replace(hfSplit);
      if (!hfResults.value) return;
      try {
        const splits = await get("/benchmarks/hf/splits", { dataset: hfResults.value });
        replace(hfSplit, splits.items.map((s) => h("option", { value: `${s.config}\u0000${s.split}` }, `${s.config} / ${s.split}`)));
      } catch (err) {
        fail(err);
      }
    }

    function drawDetail() {
      if (state.kind === "catalog") replace(detail, benchmarks.items.length ? field("Benchmark", benchSel) : h("p", { class: "muted" }, "The catalog is empty."));
      else if (state.kind === "recipe") replace(detail, recipes.length ? field("Recipe", recipeSel) : h("p", { class: "muted" }, "No recipes registered yet (POST /recipes, or caseshelf recipe register)."));
      else if (state.kind === "file") replace(detail, field("File", fileInput), field("Map its rows with", fileRecipe), field("Category (a new mapping)", category));
      else
        replace(detail,
          h("div", { class: "toolbar" }, field("Search Hugging Face", hfQuery), h("button", { type: "button", class: "secondary", onclick: async () => {
            try {
              const found = await get("/benchmarks/hf/search", { q: hfQuery.value.trim(), limit: 20 });
              replace(hfResults, found.items.map((d) => h("option", { value: d.id }, d.id)));
              replace(hfFound, h("p", { class: "muted" }, `${found.items.length} datasets found`));
              await loadSplits();
            } catch (err) {
              fail(err);
            }
          } }, "Search")),
          hfFound, field("Dataset", hfResults), field("Config / split", hfSplit), field("Category", category));
    }
    drawDetail();

    async function next(e) {
      e.preventDefault();
      replace(messages);
      try {
        state.mappingEdited = false;
        state.source = null;
        state.file = null;
        if (state.kind === "catalog" || state.kind === "recipe") {
          state.recipeRef = state.kind === "catalog" ? benchSel.value : recipeSel.value;
          if (!state.recipeRef) throw new Error("choose a recipe");
          state.recipe = (await get(`/recipes/${encodeURIComponent(state.recipeRef)}`)).recipe;
        } else if (state.kind === "file") {
          const file = fileInput.files && fileInput.files[0];
          if (!file) throw new Error("choose a file");
          state.file = file;
          const fmt = formatOf(file.name);
          if (fileRecipe.value) {
            state.recipeRef = fileRecipe.value;
            state.recipe = (await get(`/recipes/${encodeURIComponent(fileRecipe.value)}`)).recipe;
          } else {
            state.recipeRef = null;
            state.recipe = { id: safeId(file.name), version: "1.0.0", category: category.value, source: { kind: fmt }, mapping: { task_field: "question" } };
          }
          state.source = fmt === "parquet" ? null : { kind: fmt, text: await head(file) };
        } else {
          if (!hfResults.value || !hfSplit.value) throw new Error("search for a dataset and choose its split");
          const [config, split] = hfSplit.value.split("\u0000");
          state.recipeRef = null;
          state.recipe = {
            id: safeId(hfResults.value.split("/").pop()),
            version: "1.0.0",
            category: category.value,
            source: { kind: "huggingface", dataset: hfResults.value, config, split },
            mapping: { task_field: "question" },
          };
        }
        await previewStep();
      } catch (err) {
        fail(err);
      }
    }
    show(0, h("h2", null, "Where are the rows?"), h("form", { onsubmit: next, "aria-label": "Source" }, radios, detail, h("button", { type: "submit" }, "Preview")));
  }

  function recipeForRequest() {
    if (state.recipeRef && !state.mappingEdited) return state.recipeRef;
    return state.recipe;
  }

  function previewBody() {
    const b = { recipe: recipeForRequest() };
    if (state.source) b.source = state.source;
    return b;
  }

  // -- step 2: rows and fields -------------------------------------------------------------
  async function previewStep() {
    if (state.kind === "file" && !state.source) {
      show(1, h("h2", null, "Preview"), h("p", null, `${state.file.name} (${fmtBytes(state.file.size)}) is a parquet file: it is read once uploaded, so there is no preview before the import.`),
        h("button", { type: "button", onclick: () => mappingStep() }, "Mapping"), " ", h("button", { type: "button", class: "secondary", onclick: sourceStep }, "Back"));
      return;
    }
    replace(messages, h("p", { class: "muted", role: "status" }, "Reading the first rows…"));
    const p = (await post("/benchmarks/preview", previewBody())).data;
    state.preview = p;
    const fields = p.fields || [];
    show(1,
      h("h2", null, "Rows and fields"),
      h("p", null, `Fields found (${fields.length}): `, fields.map((f) => h("code", { class: "badge" }, f))),
      rowsTable(p.rows, fields),
      h("div", { class: "toolbar" }, h("button", { type: "button", onclick: () => mappingStep() }, "Adjust the mapping"), h("button", { type: "button", class: "secondary", onclick: sourceStep }, "Back")));
  }

  function rowsTable(rows, fields) {
    const cols = fields.slice(0, 8);
    const cell = (v) => {
      const t = typeof v === "string" ? v : JSON.stringify(v);
      return t === undefined ? "" : t.length > 160 ? `${t.slice(0, 159)}…` : t;
    };
    return h("div", { class: "scroll-x" }, h("table", { "aria-label": "First rows" },
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "row"), cols.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", null, (rows || []).map((r, i) => h("tr", null, h("td", null, String(i + 1)), cols.map((c) => h("td", null, cell(r[c]))))))));
  }

  // -- step 3: the mapping, and the cases it makes --------------------------------------------
  function mappingStep() {
    const fields = (state.preview && state.preview.fields) || [];
    if (!state.recipeRef && fields.length) state.recipe = { ...state.recipe, mapping: guessMapping(fields, state.recipe.mapping || {}) };
    const mapping = { ...(state.recipe.mapping || {}) };
    const selects = MAPPING_FIELDS.map(([key, label]) => {
      const current = mapping[key] || "";
      const options = ["", ...fields];
      if (current && !options.includes(current)) options.push(current);
      const sel = h("select", { "data-key": key }, options.map((f) => h("option", { value: f, selected: f === current }, f || "(none)")));
      return { key, el: field(label, sel), sel };
    });
    const tagFields = h("input", { type: "text", value: (mapping.tag_fields || []).join(", "), placeholder: "difficulty, subject" });
    const json = h("textarea", { rows: "10", spellcheck: "false" }, JSON.stringify(mapping, null, 2));
    const cases = h("div", { "aria-live": "polite" });

    function fromControls() {
      let m;
      try {
        m = JSON.parse(json.value || "{}");
      } catch (err) {
        throw new Error(`the mapping is not valid JSON: ${err.message}`);
      }
      for (const s of selects) {
        if (s.sel.value) m[s.key] = s.sel.value;
        else delete m[s.key];
      }
      const t = tagFields.value.split(",").map((x) => x.trim()).filter(Boolean);
      if (t.length) m.tag_fields = t;
      else delete m.tag_fields;
      return m;
    }
    function syncJson() {
      try {
        json.value = JSON.stringify(fromControls(), null, 2);
      } catch {
        /* the JSON is being edited: leave it */
      }
    }
    for (const s of selects) s.sel.addEventListener("change", syncJson);
    tagFields.addEventListener("change", syncJson);

    async function previewCases() {
      replace(cases, h("p", { class: "muted", role: "status" }, "Mapping the first rows…"));
      try {
        const m = fromControls();
        if (JSON.stringify(m) !== JSON.stringify(state.recipe.mapping || {})) {
          state.recipe = { ...state.recipe, mapping: m };
          state.mappingEdited = true;
        }
        if (!state.source && state.kind === "file") {
          replace(cases, h("p", { class: "muted" }, "No preview for a parquet file; the mapping is checked when the import runs."));
          return true;
        }
        const p = (await post("/benchmarks/preview", previewBody())).data;
        state.preview = p;
        replace(cases,
          h("h3", null, `Cases from the first ${fmtInt(p.rows.length)} rows`),
          p.errors && p.errors.length ? h("div", { class: "error", role: "alert" }, h("strong", null, `${p.errors.length} rows do not map`), h("ul", null, p.errors.map((e) => h("li", null, `row ${e.row}: ${e.detail}`)))) : null,
          h("div", { class: "scroll-x" }, h("table", { "aria-label": "Previewed cases" },
            h("thead", null, h("tr", null, h("th", { scope: "col" }, "id"), h("th", { scope: "col" }, "inputs.user"), h("th", { scope: "col" }, "ground truth"), h("th", { scope: "col" }, "tags"))),
            h("tbody", null, p.cases.map((c) => h("tr", { "data-case": c.id },
              h("td", null, c.id),
              h("td", { class: "truncate" }, typeof (c.inputs || {}).user === "string" ? c.inputs.user : JSON.stringify((c.inputs || {}).user ?? "")),
              h("td", null, JSON.stringify((c.expectations || {}).ground_truth ?? "")),
              h("td", null, (c.tags || []).map((t) => h("span", { class: "badge" }, t)))))))),
          h("details", null, h("summary", null, "The previewed cases as JSON"), jsonBlock(p.cases)));
        return !(p.errors && p.errors.length) || p.cases.length > 0;
      } catch (err) {
        replace(cases, errorBox(err));
        return false;
      }
    }

    show(2,
      h("h2", null, "Mapping"),
      h("p", { class: "muted" }, "How a row becomes a case. The fields are those found in the first rows; the JSON below holds every mapping option of the recipe."),
      h("div", { class: "row" }, selects.map((s) => s.el), field("Tags from", tagFields)),
      field("The whole mapping (JSON)", json),
      h("div", { class: "toolbar" },
        h("button", { type: "button", class: "secondary", onclick: previewCases }, "Preview the cases"),
        h("button", { type: "button", onclick: async () => { if (await previewCases()) importStep(); } }, "Next: import"),
        h("button", { type: "button", class: "secondary", onclick: () => previewStep().catch(fail) }, "Back")),
      cases);
    previewCases();
  }

  // -- step 4: the import ------------------------------------------------------------------------
  function importStep() {
    const dataset = h("input", { type: "text", required: true, value: state.recipe.id });
    const version = h("input", { type: "text", placeholder: "e.g. 1.0.0" });
    const bump = h("select", null, h("option", { value: "" }, "(default: minor, or 1.0.0)"), ["major", "minor", "patch"].map((b) => h("option", { value: b }, b)));
    const limit = h("input", { type: "number", min: "1", step: "1" });
    const progressEl = h("div", { "aria-live": "polite" });
    const go = h("button", { type: "submit" }, "Import");

    function target() {
      const t = { dataset: dataset.value.trim() };
      if (version.value.trim()) t.version = version.value.trim();
      else if (bump.value) t.bump = bump.value;
      if (limit.value) t.limit = Number(limit.value);
      return t;
    }

    function progress(label, value, max) {
      const bar = h("progress", { class: "progress", max: max ?? null, value: value ?? null, "aria-label": label });
      if (value === undefined) bar.removeAttribute("value");
      replace(progressEl, h("p", { role: "status", "data-state": label }, label), bar);
    }

    async function land(id, ver) {
      replace(progressEl, h("p", { class: "ok", role: "status" }, `Imported ${id}@${ver}.`));
      navigate(paths.version(id, ver));
    }

    async function run(e) {
      e.preventDefault();
      go.disabled = true;
      replace(messages);
      try {
        if (state.kind !== "file") {
          progress("Importing… (reading the whole source)");
          const res = (await post("/benchmarks/import", { ...previewBody(), ...target() })).data;
          await land(res.id, res.version);
          return;
        }
        const file = state.file;
        const req = { filename: uploadName(file.name), recipe: recipeForRequest(), format: formatOf(file.name), ...target() };
        const up = (await post("/uploads", req)).data;
        if (!up.upload_url) throw new Error("this server takes no uploads (no upload URL)");
        progress(`Uploading ${file.name}…`, 0, file.size);
        await upload(up.upload_url, file, (done, total) => progress(`Uploading ${file.name}… ${fmtBytes(done)} of ${fmtBytes(total)}`, done, total));
        const first = await get(`/jobs/${encodeURIComponent(up.job_id)}`);
        const job = await followJob(first, (j) => progress(`Job ${j.id}: ${j.state}`), ctx.alive);
        if (!job) return;
        if (job.state === "failed") {
          const err = job.error || {};
          throw new Error(`the import failed: ${err.detail || err.title || "unknown error"}`);
        }
        const r = job.result || {};
        await land(r.id || r.dataset || target().dataset, r.version);
      } catch (err) {
        replace(progressEl);
        fail(err);
        go.disabled = false;
      }
    }

    show(3,
      h("h2", null, "Import"),
      h("form", { onsubmit: run, "aria-label": "Import" },
        h("div", { class: "row" }, field("Dataset id", dataset), field("Version", version, "or a bump"), field("Bump", bump), field("Limit", limit, "only the first N rows (stamped)")),
        h("div", { class: "toolbar" }, go, h("button", { type: "button", class: "secondary", onclick: mappingStep }, "Back"))),
      progressEl);
  }

  replace(ctx.main, h("h1", { tabindex: "-1" }, "Import a benchmark"), stepsEl, messages, body);
  sourceStep();
  ctx.ready();
}
