/* The self-check page's answer boxes. A port of kvlab.selfcheck.check_answer: every table and
 * pattern comes from window.KVLAB_QUIZ.rules, exported from Python when the site is built
 * (_ext/kvlab_quiz.py prepends it to this file), and tests/site/test_quiz.py runs the Python
 * checker's table of cases through window.kvlabQuiz.checkAnswer and expects the same verdicts.
 * No library, nothing fetched. */
(function () {
  "use strict";
  var DATA = window.KVLAB_QUIZ;
  var R = DATA.rules;
  function rx(p, extra) { return new RegExp(p.source, p.flags + (extra || "")); }
  function has(obj, key) { return Object.prototype.hasOwnProperty.call(obj, key); }
  var NOISE = rx(R.noise, "g");
  var APPROX = rx(R.approx);
  var DENOM = rx(R.denominator);
  var NUMBER = new RegExp("^(?:" + R.number.source + ")", R.number.flags);
  var SPACES = rx(R.space_groups, "g");
  var RATIO = rx(R.ratio);
  var LOWER = {};
  Object.keys(R.units).concat(Object.keys(R.aliases)).forEach(function (k) {
    if (k) { LOWER[k.toLowerCase()] = true; }
  });

  function ReadError(message) { this.message = message; }

  function readDigits(num) {
    var e = num.search(/[eE]/);
    var mantissa = e >= 0 ? num.slice(0, e) : num;
    var exponent = e >= 0 ? num.slice(e + 1) : "";
    var m = /^([-+]?)([\d.,]*)$/.exec(mantissa);
    if (!m) { throw new ReadError("cannot read '" + num + "'"); }
    var sign = m[1], body = m[2];
    var scale = exponent ? Number("1e" + exponent) : 1;
    var commas = body.split(",").length - 1, dots = body.split(".").length - 1;
    function value(t) {
      if (!/^\d*\.?\d*$/.test(t) || t === "" || t === ".") {
        throw new ReadError("cannot read '" + num + "'");
      }
      return Number(sign + t) * scale;
    }
    function grouped(t, sep) {
      var parts = t.split(sep), head = parts[0], groups = parts.slice(1);
      if (!head || head.length > 3 || groups.some(function (g) { return g.length !== 3; })) {
        throw new ReadError("digit groups must have three digits");
      }
      return head + groups.join("");
    }
    var i;
    if (commas && dots) {
      if (body.lastIndexOf(",") > body.lastIndexOf(".")) {
        i = body.lastIndexOf(",");
        return [value(grouped(body.slice(0, i), ".") + "." + body.slice(i + 1))];
      }
      i = body.lastIndexOf(".");
      return [value(grouped(body.slice(0, i), ",") + "." + body.slice(i + 1))];
    }
    if (commas > 1) { return [value(grouped(body, ","))]; }
    if (dots > 1) { return [value(grouped(body, "."))]; }
    if (commas === 1) {
      var whole = body.split(",")[0], frac = body.split(",")[1];
      if (frac.length === 3 && whole !== "" && whole !== "0" && whole.length <= 3) {
        return [value(whole + frac), value(whole + "." + frac)];
      }
      return [value(whole + "." + frac)];
    }
    return [value(body)];
  }

  function readUnit(rest) {
    rest = rest.replace(NOISE, " ");
    rest = rest.split(/\s+/).filter(Boolean).join(" ").replace(/^[ .]+|[ .]+$/g, "");
    var unit = rest.replace(/ /g, "");
    if (has(R.units, unit)) { return [unit, 1]; }
    if (has(R.aliases, unit)) { return [R.aliases[unit], 1]; }
    if (has(R.scale, rest)) { return ["", R.scale[rest]]; }
    if (rest === "m") { throw new ReadError("m means milli; type M or million for a million"); }
    if (has(LOWER, unit.toLowerCase())) { throw new ReadError(R.case_help); }
    throw new ReadError("unknown unit '" + rest + "'");
  }

  function readNumber(s) {
    var m = NUMBER.exec(s);
    if (!m) { throw new ReadError("no number at the start"); }
    var num = m[0], rest = s.slice(num.length);
    while (num.length && ".,".indexOf(num[num.length - 1]) >= 0) {
      rest = num[num.length - 1] + rest;
      num = num.slice(0, -1);
    }
    return [readDigits(num), rest];
  }

  function parseReadings(text) {
    var s = String(text).trim();
    if (!s) { throw new ReadError("empty"); }
    s = s.replace(SPACES, "").replace(APPROX, "");
    var got = readNumber(s), values = got[0], rest = got[1];
    var den = DENOM.exec(rest);
    if (den) {
      var below = readNumber(rest.slice(den[0].length));
      if (below[0].some(function (b) { return b === 0; })) {
        throw new ReadError("a fraction's denominator cannot be 0");
      }
      var over = [];
      values.forEach(function (a) { below[0].forEach(function (b) { over.push(a / b); }); });
      values = over;
      rest = below[1];
    }
    var u = readUnit(rest.replace(/^[.,]+/, ""));
    return values.map(function (v) {
      v *= u[1];
      if (!isFinite(v)) { throw new ReadError("not a finite number"); }
      return [v, u[0]];
    });
  }

  function candidates(value, unit, want) {
    var fam = R.units[unit][0], factor = R.units[unit][1];
    var wantFam = R.units[want][0], wantFactor = R.units[want][1];
    if (unit === "") { return want === "%" ? [value, value * 100] : [value]; }
    if (wantFam === "number" && fam === "factor") { return [value]; }
    if (fam !== wantFam) { return "that unit (" + unit + ") is not a " + wantFam + " unit; answer in " + want; }
    return [value * factor / wantFactor];
  }

  function close(x, a, tol, absolute) {
    if (absolute || a === 0) { return Math.abs(x - a) <= tol * (1 + 1e-12); }
    return Math.abs(x - a) <= tol * Math.abs(a) * (1 + 1e-12);
  }

  function checkRatio(text, parts, tol) {
    if (text === null || text === undefined || !String(text).trim()) {
      return { ok: false, message: "Type an answer first, like 3 : 4." };
    }
    var m = RATIO.exec(String(text));
    if (!m) { return { ok: false, message: "Type a ratio, like 3 : 4." }; }
    var got = [];
    for (var i = 1; i <= 2; i++) {
      var readings;
      try { readings = parseReadings(m[i]); } catch (err) {
        if (err instanceof ReadError) { return { ok: false, message: "Could not read '" + m[i] + "' as a number." }; }
        throw err;
      }
      var plain = readings.filter(function (r) { return r[1] === ""; }).map(function (r) { return r[0]; });
      got.push(plain.length ? plain : [readings[0][0]]);
    }
    for (var x = 0; x < got[0].length; x++) {
      for (var y = 0; y < got[1].length; y++) {
        var a = got[0][x], b = got[1][y];
        if (close(a, parts[0], tol, false) && close(b, parts[1], tol, false)) {
          return { ok: true, message: "Right." };
        }
        if (b > 0 && parts[1] > 0 && a > 0 && close(a / b, parts[0] / parts[1], tol, false)) {
          return { ok: true, message: "Right: " + a + " : " + b + " is the same ratio." };
        }
      }
    }
    return { ok: false, message: "Not quite." };
  }

  /* The verdict for what a reader typed: {ok, message}. tolerance null means the default. */
  function checkAnswer(text, answer, unit, tolerance) {
    unit = unit || "";
    if (!has(R.units, unit)) { throw new Error("unsupported unit " + unit); }
    if (tolerance === null || tolerance === undefined) {
      tolerance = unit === "%" ? R.percent_points : R.relative;
    }
    if (Array.isArray(answer)) { return checkRatio(text, answer, tolerance); }
    if (text === null || text === undefined || !String(text).trim()) {
      return { ok: false, message: "Type an answer first (a number, in " + (unit || "any unit") + ")." };
    }
    var readings;
    try { readings = parseReadings(text); } catch (err) {
      if (err instanceof ReadError) {
        return { ok: false, message: "Could not read that: " + err.message + "." };
      }
      throw err;
    }
    var cands = [], problem = "";
    readings.forEach(function (r) {
      var found = candidates(r[0], r[1], unit);
      if (typeof found === "string") { problem = found; } else { cands = cands.concat(found); }
    });
    if (!cands.length) { return { ok: false, message: "Not quite: " + problem + "." }; }
    var absolute = unit === "%";
    if (cands.some(function (c) { return close(c, answer, tolerance, absolute); })) {
      return { ok: true, message: "Right." };
    }
    for (var i = 0; i < cands.length; i++) {
      var c = cands[i];
      if (c === 0 || answer === 0) { continue; }
      if (close(c * 8, answer, tolerance, absolute) || close(c / 8, answer, tolerance, absolute)) {
        return { ok: false, message: "Not quite: check bits against bytes (b is a bit, B a byte)." };
      }
      var k = Math.log10(Math.abs(c / answer));
      if (Math.abs(k - Math.round(k)) < 0.02 && [-9, -6, -3, 3, 6, 9].indexOf(Math.round(k)) >= 0) {
        return { ok: false, message: "Not quite: the digits look right, but check the unit prefix." };
      }
    }
    return { ok: false, message: "Not quite." };
  }

  function mount(box) {
    var cls = Array.prototype.find.call(box.classList, function (c) {
      return c.indexOf("kvlab-quiz-q-") === 0;
    });
    var q = DATA.questions.filter(function (x) { return cls && x.id === cls.slice(13); })[0];
    if (!q) { return; }
    var derivation = box.querySelector(".kvlab-quiz-derivation");
    if (derivation) { derivation.hidden = true; }
    var form = document.createElement("form");
    form.className = "kvlab-quiz-form";
    var label = document.createElement("label");
    var input = document.createElement("input");
    input.type = "text";
    input.id = "kvlab-quiz-" + q.id;
    input.autocomplete = "off";
    input.placeholder = "your answer" + (q.unit ? " in " + q.unit : "");
    label.htmlFor = input.id;
    label.textContent = q.prompt + " ";
    var button = document.createElement("button");
    button.type = "submit";
    button.textContent = "Check";
    var feedback = document.createElement("p");
    feedback.className = "kvlab-quiz-feedback";
    feedback.setAttribute("role", "status");
    form.appendChild(label);
    form.appendChild(input);
    form.appendChild(button);
    box.insertBefore(form, box.firstChild);
    box.insertBefore(feedback, form.nextSibling);
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var v = checkAnswer(input.value, q.answer, q.unit, q.tolerance);
      feedback.textContent = v.message + (!v.ok && q.hint && /^Not quite/.test(v.message) ? " Hint: " + q.hint : "");
      feedback.className = "kvlab-quiz-feedback " + (v.ok ? "kvlab-quiz-right" : "kvlab-quiz-wrong");
      if (derivation && input.value.trim()) {
        derivation.hidden = false;
        var ans = derivation.querySelector(".kvlab-quiz-answer");
        if (!ans) {
          ans = document.createElement("p");
          ans.className = "kvlab-quiz-answer";
          derivation.insertBefore(ans, derivation.firstChild);
        }
        ans.textContent = "Answer: " + q.shown + ". " + q.reason;
      }
    });
  }

  window.kvlabQuiz = { checkAnswer: checkAnswer, parseReadings: parseReadings, questions: DATA.questions };
  function start() { Array.prototype.forEach.call(document.querySelectorAll(".kvlab-quiz"), mount); }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
})();
