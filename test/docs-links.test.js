'use strict'

// Every relative link and #anchor in README.md, CHANGELOG.md and docs/*.md
// leads somewhere: the file exists in the repository, and the anchor is a
// heading of the page it points at (GitHub's slugs) or an explicit <a id>.
// Whether a linked file also ships in the package is test/package.test.js's.
const { test } = require('node:test')
const assert = require('node:assert')
const fs = require('fs')
const path = require('path')
const { ROOT, markdownPages, relativeLinks, headingAnchors, slug } = require('./helpers/markdown')

test('GitHub heading slugs: lowercase, punctuation dropped, spaces to -, repeats numbered', () => {
  assert.strictEqual(slug('Quick start (30 seconds)'), 'quick-start-30-seconds')
  assert.strictEqual(slug('`clusterize(createApp, options?) → handle`'), 'clusterizecreateapp-options--handle')
  assert.strictEqual(slug('Command line: `clusterize`'), 'command-line-clusterize')
  assert.strictEqual(slug('The [bus](docs/bus.md) and snake_case'), 'the-bus-and-snake_case')
  assert.deepStrictEqual([...headingAnchors('# A\n## Options\n```\n# not a heading\n```\n### Options\n#### Options\n<a id="custom"></a>\n')],
    ['a', 'options', 'options-1', 'options-2', 'custom'])
})

test('relative links and anchors in README, CHANGELOG and docs resolve', () => {
  const anchorsOf = new Map()
  const anchors = (file) => {
    if (!anchorsOf.has(file)) anchorsOf.set(file, headingAnchors(fs.readFileSync(path.join(ROOT, file), 'utf8')))
    return anchorsOf.get(file)
  }
  const broken = []
  let files = 0
  let fragments = 0
  for (const page of markdownPages()) {
    for (const link of relativeLinks(page, fs.readFileSync(path.join(ROOT, page), 'utf8'))) {
      const file = link.file || page
      if (link.file) {
        files++
        if (!fs.existsSync(path.join(ROOT, file))) {
          broken.push(`${page}: ${link.target}: ${file} does not exist`)
          continue
        }
      }
      if (link.anchor === null) continue
      fragments++
      if (!file.endsWith('.md')) broken.push(`${page}: ${link.target}: an anchor into a file that is not Markdown`)
      else if (!anchors(file).has(link.anchor)) broken.push(`${page}: ${link.target}: no heading in ${file} has the anchor #${link.anchor}`)
    }
  }
  assert.ok(files >= 5, `${files} file links checked`)
  assert.ok(fragments >= 20, `${fragments} anchors checked`)
  assert.deepStrictEqual(broken, [])
})
