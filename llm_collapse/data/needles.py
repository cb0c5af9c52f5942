"""The project's own 100 needle facts and their questions, for the synthetic needle task.

LongEmbed's needle task hides one GPT-4-written fact per document and asks one question per fact.
These 100 facts were written for llm_collapse (none is taken from LongEmbed). Decisions:

* Most facts are about **invented** people, places and objects (a town, a ship, a recipe), so a
  model cannot answer from world knowledge alone and no false claim is made about a real thing. A
  few are true textbook facts; they are phrased so that no other needle answers the same question.
* Each fact is one sentence ending in a full stop and each question one sentence ending in "?"; the
  needle generator inserts a fact at a sentence boundary, so it must stay a whole sentence.
* Every question names a subject that occurs in exactly one fact, so the relevant document of a
  query is unambiguous; facts and questions are all distinct (checked by the tests).
* The table is a plain ``domain | fact | question`` block so ruff format leaves it readable.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NEEDLES", "Needle"]


@dataclass(frozen=True)
class Needle:
    """One needle fact and the question it answers.

    Attributes:
        domain: Coarse topic (physics, history, art, ...).
        fact: The sentence hidden in a haystack.
        question: The query whose relevant document holds ``fact``.
    """

    domain: str
    fact: str
    question: str


_TABLE = """
physics | The Varro coil in the Lindqvist laboratory hums at exactly 417 hertz when cooled below twelve kelvin. | At what frequency does the Varro coil hum when it is cooled below twelve kelvin?
physics | Sound travels roughly four times faster through water than through air at room temperature. | How much faster does sound travel through water than through air?
physics | The brass pendulum in Tomas Heller's 1788 clock was exactly one metre long. | How long was the pendulum in Tomas Heller's 1788 clock?
physics | Engineers at the Orsk wind tunnel measured a record gust of 311 kilometres per hour in 1974. | What record gust was measured at the Orsk wind tunnel in 1974?
physics | The Keswick prism splits white light into nine visible bands instead of the usual seven. | Into how many visible bands does the Keswick prism split white light?
chemistry | The glaze on Pellworth pottery turns blue because it contains a trace of cobalt oxide. | What makes the glaze on Pellworth pottery turn blue?
chemistry | A drop of Marrow lye solution has a pH of 13.2 when freshly mixed. | What is the pH of freshly mixed Marrow lye solution?
chemistry | The chemist Ilse Brandauer first isolated the dye called quarry amber from birch bark in 1861. | From what did Ilse Brandauer isolate the dye called quarry amber?
chemistry | Table salt is made of sodium and chlorine in equal numbers of atoms. | Which two elements make up table salt?
biology | The Tallis river mussel can filter about forty litres of water a day. | How much water can a Tallis river mussel filter in a day?
biology | The red-crested fen warbler lays exactly three speckled eggs each spring. | How many eggs does the red-crested fen warbler lay each spring?
biology | A healthy adult human heart beats about one hundred thousand times a day. | About how many times a day does a healthy adult heart beat?
biology | The blind cave shrimp of Lake Orvane finds food by sensing tiny changes in water pressure. | How does the blind cave shrimp of Lake Orvane find its food?
biology | Honey bees tell each other where flowers are by performing a waggle dance. | How do honey bees tell each other where flowers are?
astronomy | The amateur astronomer Rosa Quill discovered the comet named Quill-Harrow on a frozen night in 1907. | Which comet did the amateur astronomer Rosa Quill discover in 1907?
astronomy | The Halden observatory dome rotates once every eleven minutes when tracking the Moon. | How long does the Halden observatory dome take to rotate once while tracking the Moon?
astronomy | Light from the Sun takes a little over eight minutes to reach the Earth. | How long does sunlight take to reach the Earth?
astronomy | The minor planet 8812 Verbena has a day that lasts almost thirty-one hours. | How long is a day on the minor planet 8812 Verbena?
geology | The Skarn cliffs are made of pink granite that formed about four hundred million years ago. | What kind of rock are the Skarn cliffs made of?
geology | The hot spring at Bellmere erupts every forty-three minutes like a small geyser. | How often does the hot spring at Bellmere erupt?
geology | Miners in Copper Hollow found a quartz crystal as long as a rowing boat in 1899. | How long was the quartz crystal found in Copper Hollow in 1899?
geology | Diamonds and graphite are both made of pure carbon. | What element are both diamonds and graphite made of?
geography | The village of Oskarby sits on an island in the middle of a lake that is itself on an island. | Where does the village of Oskarby sit?
geography | The river Tamsel flows north for 212 kilometres before it reaches the sea at Port Ellery. | Where does the river Tamsel reach the sea?
geography | The tallest waterfall in the Vardun range drops 460 metres into a basin called the Cauldron. | What is the name of the basin below the tallest waterfall in the Vardun range?
geography | The Marlowe Strait is so narrow that a bell rung on one shore can be heard on the other. | How narrow is the Marlowe Strait?
geography | The town of Gresham Flats lies exactly on the line where three counties meet. | Where does the town of Gresham Flats lie?
history | The treaty ending the Salt Marsh War was signed on a fishing boat in 1623. | Where was the treaty ending the Salt Marsh War signed?
history | Queen Adelind of Varra outlawed the ringing of church bells after sunset in 1412. | What did Queen Adelind of Varra outlaw in 1412?
history | The first public library in the city of Ambergate opened with only ninety-six books. | With how many books did the first public library in Ambergate open?
history | The mail riders of the Linden Post changed horses every twenty kilometres. | How often did the mail riders of the Linden Post change horses?
history | The lost charter of Westholm was found in 1958 inside the lining of an old saddle. | Where was the lost charter of Westholm found?
history | The Great Fire of Corran in 1731 started in a candle maker's shop on Tallow Lane. | Where did the Great Fire of Corran start?
art | The painter Mirela Oss mixed crushed eggshell into her white paint to make it glitter. | What did the painter Mirela Oss mix into her white paint?
art | The mural in the Fenwick railway station shows 144 swallows flying over a wheat field. | How many swallows are shown in the Fenwick railway station mural?
art | The sculptor Aurel Danek carved his famous sleeping fox from a single block of black marble. | From what material did Aurel Danek carve his sleeping fox?
art | The Lantern Portrait in the Hallam gallery was painted by candlelight over seven winters. | How long did it take to paint the Lantern Portrait in the Hallam gallery?
music | The composer Ivo Marek wrote his Harbour Symphony for an orchestra of ship horns. | For what kind of orchestra did Ivo Marek write his Harbour Symphony?
music | The bell tower in Saint Oda's church plays a tune with exactly twenty-two notes at noon. | How many notes are in the tune the Saint Oda's bell tower plays at noon?
music | A standard piano has eighty-eight keys. | How many keys does a standard piano have?
music | The folk singer Nell Carrow recorded her first album in a grain silo for the echo. | Where did the folk singer Nell Carrow record her first album?
music | The Dunmore brass band has played at every harvest fair since 1867. | Since when has the Dunmore brass band played at every harvest fair?
literature | The novelist Edda Strand wrote every chapter of her last book on the back of train tickets. | On what did Edda Strand write the chapters of her last book?
literature | The poem The Ninth Lantern has one stanza for each month of a long winter voyage. | How are the stanzas of the poem The Ninth Lantern arranged?
literature | The storyteller Amos Ferrow claimed that his tales were taught to him by a talking crow. | Who did Amos Ferrow claim taught him his tales?
literature | The library of Castel Moro keeps a dictionary that was written entirely by one monk over forty years. | Who wrote the dictionary kept in the library of Castel Moro?
mathematics | The sum of the angles inside any triangle on a flat plane is one hundred and eighty degrees. | What is the sum of the angles inside a triangle on a flat plane?
mathematics | The mathematician Lotte Havel proved that every Havel number is the sum of two consecutive squares. | What did Lotte Havel prove about every Havel number?
mathematics | A regular hexagon can be split into six equilateral triangles that meet at its centre. | Into what shapes can a regular hexagon be split?
geometry | The roof of the Ostend pavilion is a perfect hyperbolic paraboloid made of copper sheets. | What shape is the roof of the Ostend pavilion?
geometry | The garden maze at Hollins Court is laid out as a spiral with eleven turns. | How many turns does the spiral maze at Hollins Court have?
sports | The rowing club of Kettle Bay won the river cup nine years in a row with the same captain. | How many years in a row did the Kettle Bay rowing club win the river cup?
sports | The longest recorded match in the Wexley chess league lasted 271 moves. | How many moves did the longest match in the Wexley chess league last?
sports | The runner Petra Solvang finished the Highland marathon barefoot in 1952. | How did Petra Solvang finish the Highland marathon in 1952?
sports | The ice rink at Fallowmere freezes naturally and opens only when the ice is twelve centimetres thick. | When does the ice rink at Fallowmere open?
food | The bakers of Rennick add a pinch of black pepper to their honey cake. | What do the bakers of Rennick add to their honey cake?
food | The best thing to eat at the Corvey night market is a grilled pear with goat cheese. | What is the best thing to eat at the Corvey night market?
food | Harbour stew from Lisel is always cooked in seawater rather than fresh water. | In what is harbour stew from Lisel cooked?
food | The cheese called Old Tanner is aged in caves for exactly thirty months. | How long is the cheese called Old Tanner aged?
food | Tea pickers in the Amra hills harvest only the two top leaves and the bud of each shoot. | Which leaves do the tea pickers in the Amra hills harvest?
architecture | The Crane Bridge in Saltford was built without a single nail, using only wooden pegs. | How was the Crane Bridge in Saltford held together?
architecture | The lighthouse on Marrow Point was painted with green and white stripes in 1911. | How was the lighthouse on Marrow Point painted in 1911?
architecture | The town hall of Brisk has a clock tower with four faces that each show a different time zone. | What does each face of the Brisk town hall clock show?
architecture | The underground cistern of Valen holds enough water to supply the town for two dry summers. | How much water does the underground cistern of Valen hold?
technology | The first telegraph line across the Osric Plain was strung along a row of poplar trees. | Along what was the first telegraph line across the Osric Plain strung?
technology | The calculating machine built by Hugo Lenz in 1834 used walnut gears instead of metal ones. | What were the gears of Hugo Lenz's 1834 calculating machine made of?
technology | The canal lift at Rosmarin raises boats twenty-five metres in under four minutes. | How high does the canal lift at Rosmarin raise boats?
technology | The printing shop of Jan Roeder could set a whole newspaper page in ninety minutes. | How long did the printing shop of Jan Roeder need to set a newspaper page?
medicine | The physician Clara Weiss cured the fever outbreak in Dunhallow by closing one contaminated well. | How did Clara Weiss stop the fever outbreak in Dunhallow?
medicine | The Ardent hospital was the first in the region to boil every surgical tool before use. | What was the Ardent hospital the first in the region to do?
medicine | Willow bark was chewed for centuries to ease pain because it contains a substance similar to aspirin. | Why was willow bark chewed to ease pain?
medicine | Sailors on the ship Meridian avoided scurvy by eating pickled cabbage every day. | How did the sailors on the ship Meridian avoid scurvy?
economics | The market town of Hessle used salted herring as its currency until 1640. | What did the market town of Hessle use as currency until 1640?
economics | The Guild of Lamp Makers in Orrin fixed the price of oil at one silver coin per jar. | At what price did the Guild of Lamp Makers in Orrin fix a jar of oil?
economics | The cooperative bank of Tilney lends money to farmers only after the first frost. | When does the cooperative bank of Tilney lend money to farmers?
economics | The wool trade of the Pellam valley collapsed when a storm sank the entire fleet in 1703. | Why did the wool trade of the Pellam valley collapse?
linguistics | The island dialect of Skerra has eleven different words for fog. | How many words for fog does the island dialect of Skerra have?
linguistics | The Varran alphabet has no letter for the sound of an English W. | Which sound has no letter in the Varran alphabet?
linguistics | In the mountain language Kel, the word for friend also means shared bread. | What else does the word for friend mean in the mountain language Kel?
linguistics | The ancient town of Umbria Nova wrote its laws on clay tablets in two languages side by side. | How did the town of Umbria Nova write its laws?
zoology | The Tarn otter can hold its breath for nearly eight minutes while hunting under ice. | How long can the Tarn otter hold its breath?
zoology | The grey parrot owned by the sailor Ben Holm could whistle the first bars of a sea shanty. | What could the grey parrot of the sailor Ben Holm whistle?
zoology | Flocks of Moss Island geese fly south in a line shaped like the letter J. | In what shape do the Moss Island geese fly south?
zoology | The dung beetle steers at night by following the faint band of the Milky Way. | How does the dung beetle steer at night?
botany | The ghost orchid of the Tellan marsh blooms for only one night every three years. | How often does the ghost orchid of the Tellan marsh bloom?
botany | The old oak on Gallow Green is hollow enough for six people to stand inside its trunk. | How many people can stand inside the old oak on Gallow Green?
botany | Sunflower buds turn to follow the Sun across the sky during the day. | What do sunflower buds do during the day?
botany | The saffron fields of Orla are harvested by hand in the two weeks after the first autumn rain. | When are the saffron fields of Orla harvested?
meteorology | The village of Caddon once saw green hail fall for ten minutes during a summer storm. | What unusual weather did the village of Caddon once see?
meteorology | Fog in the Harran valley lifts, on average, at a quarter past ten in the morning. | At what time does fog in the Harran valley usually lift?
meteorology | The weather station on Mount Elvar recorded snow in every month of the year 1816. | In which year did the Mount Elvar station record snow in every month?
oceanography | The tide in Ferris Bay rises nearly fourteen metres between low and high water. | How much does the tide rise in Ferris Bay?
oceanography | The wreck of the schooner Albatross lies upright on a sandbank forty metres below the surface. | How does the wreck of the schooner Albatross lie?
oceanography | The warm current called the Selka Drift carries coconuts all the way to the northern fjords. | What does the warm current called the Selka Drift carry to the northern fjords?
film | The silent film The Glass Orchard was shot entirely inside an abandoned greenhouse. | Where was the silent film The Glass Orchard shot?
film | The director Otto Brem used real thunderstorms instead of studio rain for every storm scene. | What did the director Otto Brem use for his storm scenes?
transport | The night train from Aldwick to Sorrel Bay stops at a station that has no town around it. | What is unusual about a stop on the night train from Aldwick to Sorrel Bay?
transport | The ferry across Lake Minn is pulled along a steel cable by a team of two horses. | How is the ferry across Lake Minn moved?
transport | The airship Perpetua crossed the northern sea in fifty-one hours without landing. | How long did the airship Perpetua take to cross the northern sea?
games | The board game called Harbourmaster is won by the player who first fills three warehouses with tea. | How do you win the board game called Harbourmaster?
"""


def _parse(table: str) -> tuple[Needle, ...]:
    rows = []
    for line in table.strip().splitlines():
        domain, fact, question = (part.strip() for part in line.split(" | "))
        rows.append(Needle(domain=domain, fact=fact, question=question))
    return tuple(rows)


NEEDLES: tuple[Needle, ...] = _parse(_TABLE)
"""The 100 needles, in a fixed order (the generator shuffles them by seed)."""
